"""The pure core's mutation score, from cargo-mutants' output (pg_test/mutants/core runs it).

usage: core_report.py MUTANTS_OUT EQUIVALENT_LIST RESULTS_MD

A missed mutant is matched against the committed list of equivalent ones by its file and its
description (`src/core/src/x.rs: replace f -> bool with true`), not its line, so the list
survives edits elsewhere in the file. Exits 1 when a missed mutant is not on the list."""

import re
import sys


def read(path):
    try:
        with open(path) as f:
            return [line.strip() for line in f if line.strip()]
    except FileNotFoundError:
        return []


def key(line):
    """`src/core/src/lease.rs:123:5: replace x with y` -> `src/core/src/lease.rs: replace x with y`."""
    return re.sub(r"^([^:]+):\d+(?::\d+)?:", r"\1:", line.split("  #")[0]).strip()


def equivalents(path):
    """{key: why} from the list: a mutant's key, then `  # why` on the same line."""
    out = {}
    for line in read(path):
        if line.startswith("#"):
            continue
        mutant, _, why = line.partition("  # ")
        out[key(mutant)] = why.strip()
    return out


def main(out_dir, equivalent_path, results_path):
    caught, missed = read(f"{out_dir}/caught.txt"), read(f"{out_dir}/missed.txt")
    timeout, unviable = read(f"{out_dir}/timeout.txt"), read(f"{out_dir}/unviable.txt")
    known = equivalents(equivalent_path)
    explained = [m for m in missed if key(m) in known]
    gaps = [m for m in missed if key(m) not in known]
    viable = len(caught) + len(missed) + len(timeout)
    score = 100.0 * (len(caught) + len(timeout)) / viable if viable else 0.0
    with open(results_path, "w") as f:
        f.write("# The pure core's mutation score\n\n"
                "Written by `make mutants-core` (pg_test/mutants/core: cargo-mutants over `src/core/`, "
                "each mutant tested with `cargo test -p idgen-core`). A timeout (the tests never ended) "
                "counts as caught; an unviable mutant (it does not build) counts for neither.\n\n"
                f"| caught | timeout | missed | of which equivalent | unviable | score |\n"
                f"|---:|---:|---:|---:|---:|---:|\n"
                f"| {len(caught)} | {len(timeout)} | {len(missed)} | {len(explained)} | {len(unviable)} | "
                f"{score:.1f} % |\n\n")
        if explained:
            f.write("Missed, and equivalent (pg_test/mutants/core-equivalent.txt says why):\n\n")
            f.write("".join(f"- `{key(m)}`: {known[key(m)]}\n" for m in explained) + "\n")
        if gaps:
            f.write("**Missed and not explained** (a test is wanted):\n\n")
            f.write("".join(f"- `{key(m)}`\n" for m in gaps) + "\n")
    print(f"core mutants: {len(caught)} caught, {len(timeout)} timeout, {len(missed)} missed "
          f"({len(explained)} equivalent), {len(unviable)} unviable; score {score:.1f} %; {results_path}")
    for m in gaps:
        print(f"  missed: {m}")
    return 1 if gaps else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
