"""Planted bugs: each mutant removes one guarantee, and the tests of `make test` that claim to
guard it must catch it. `make mutants` (pg_test/mutants/run) applies each to a copy of the
checkout, builds and installs that copy for PostgreSQL 15, runs its guarding tests against it,
and writes the table in pg_test/mutants/results.md: the mutant, the test that caught it and how
long that took. Never in CI, and never in a release build: a mutant lives only in the copy.

A mutant is one exact edit (`old` must occur exactly once in `file`, or the runner stops and
says the mutant no longer applies: pg_test/mutants/test_mutants_apply.py checks that on every
`make test`, without a server)."""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


@dataclass(frozen=True)
class Mutant:
    name: str
    guarantee: str
    file: str
    old: str
    new: str
    tests: tuple


MUTANTS = [
    Mutant(
        "horizon-never-persisted",
        "no id is issued past a horizon that is not on disk and in the WAL",
        "src/pg/horizon_store.rs",
        "    fn persist_horizon(&mut self, unix_ms: u64) -> std::io::Result<()> {\n        test_delay();",
        "    fn persist_horizon(&mut self, unix_ms: u64) -> std::io::Result<()> {\n        let _ = unix_ms;\n"
        "        if true {\n            return Ok(());\n        }\n        test_delay();",
        ("pg_test/test_chaos.py::test_a_short_schedule_with_a_fixed_seed_hands_out_no_id_twice",
         "pg_test/test_clock.py::test_crash_recovery_with_the_clock_back_refuses_then_resumes_above"),
    ),
    Mutant(
        "wal-record-skipped",
        "the horizon reaches standbys and restores through the WAL (the file alone stays behind)",
        "src/pg/horizon_store.rs",
        "        wal::log_horizon(unix_ms)?;\n        write_file(unix_ms)",
        "        write_file(unix_ms)",
        ("pg_test/test_replication.py::test_a_promoted_standby_with_a_slower_clock_never_reissues_or_goes_back",
         "pg_test/test_replication.py::test_a_point_in_time_restore_with_the_clock_set_back_never_reissues"),
    ),
    Mutant(
        "synchronous-wait-skipped",
        "with synchronous standbys, no id is handed out past a horizon they have not confirmed",
        "src/pg/horizon_store.rs",
        "        wait_for_synchronous_standbys(lsn)\n    }",
        "        let _ = lsn;\n        Ok(())\n    }",
        ("pg_test/test_horizon_push.py::"
         "test_a_synchronous_standby_confirms_the_horizon_before_ids_past_it_are_handed_out",),
    ),
    Mutant(
        "replay-epoch-check-skipped",
        "a standby with another idgen.epoch than its primary's refuses ids after promotion",
        "src/pg/horizon_store.rs",
        "            (record.epoch_unix_ms != own_base.epoch_unix_ms).then_some(record.epoch_unix_ms);",
        "            None::<u64>;",
        ("pg_test/test_horizon_push.py::test_a_standby_with_another_epoch_warns_and_refuses_ids_after_promotion",),
    ),
    Mutant(
        "startup-epoch-check-skipped",
        "a restart under another idgen.epoch never issues an id below, or equal to, one issued before",
        "src/pg/horizon_store.rs",
        "        epoch_unix_ms: mark.epoch_ms.unwrap_or(own.epoch_unix_ms),",
        "        epoch_unix_ms: own.epoch_unix_ms,",
        ("pg_test/test_layouts.py::test_a_later_epoch_after_a_clean_stop_never_reissues_an_id",
         "pg_test/test_layouts.py::test_a_slightly_later_epoch_is_taken_and_its_first_ids_wait_for_the_clock"),
    ),
    Mutant(
        "crash-lead-ignored",
        "the lead a crash leaves is waited out, never held against idgen.max_clock_wait",
        "src/core/src/snowflake.rs",
        "        (seed.saturating_sub(now) * unit).saturating_sub(HORIZON_LEAD_MS + unit - 1)",
        "        seed.saturating_sub(now) * unit",
        ("pg_test/test_clock.py::test_the_lead_a_crash_leaves_is_waited_out_and_is_no_clock_regression",),
    ),
    Mutant(
        "auto-fence-ignored",
        "an auto server issues nothing from its lease's end on",
        "src/sql/snowflake.rs",
        "    if permit.fence_ms != registry::NO_LIMIT {",
        "    if false && permit.fence_ms != registry::NO_LIMIT {",
        ("pg_test/test_registry.py::"
         "test_a_stopped_registry_stops_every_server_given_no_grace_at_its_lease_end_but_a_fixed_one_told_to_issue",),
    ),
    Mutant(
        "fixed-fence-ignored",
        "a fixed-id server issues nothing from its lease's end on (unless told to issue), so its id is "
        "reused safely",
        "src/core/src/lease.rs",
        "    let fence_ms = policy\n        .fence_ms(sent_ms, lease_ms, granted)\n        .unwrap_or(u64::MAX);",
        "    let fence_ms = match mode {\n        Mode::Fixed(_) => u64::MAX,\n"
        "        Mode::Auto => policy.fence_ms(sent_ms, lease_ms, granted).unwrap_or(u64::MAX),\n    };",
        ("pg_test/test_registry.py::"
         "test_a_fixed_id_cut_off_from_the_registry_stops_at_its_lease_end_and_its_id_is_reused_above_it",
         "pg_test/test_registry.py::"
         "test_a_stopped_registry_stops_every_server_given_no_grace_at_its_lease_end_but_a_fixed_one_told_to_issue"),
    ),
    Mutant(
        "unfenced-lease-handed-over",
        "an unfenced lease (a fixed id told to issue without the registry) goes to no other server "
        "until the owner frees it",
        "sql/registry/idgen_registry.sql",
        "            OR (row_.fence_ms IS NULL AND NOT (row_.holder = p_holder AND row_.holder_role = who)))",
        "            OR (row_.fence_ms IS NULL AND false))",
        ("pg_test/test_registry.py::test_an_unfenced_fixed_ids_lease_goes_to_no_other_server_but_its_own_next_run",),
    ),
    Mutant(
        "unfenced-leases-uncounted",
        "a role holds no more leases than its quota, counting its unfenced ones until the owner frees "
        "them, so no member can keep every id by claiming and releasing unfenced leases",
        "sql/registry/idgen_registry.sql",
        "       AND ((l.holder_run IS NOT NULL AND l.lease_ends_ms >= now_ms) OR l.fence_ms IS NULL)",
        "       AND ((l.holder_run IS NOT NULL AND l.lease_ends_ms >= now_ms))",
        ("pg_test/test_registry.py::"
         "test_a_member_that_releases_unfenced_leases_one_after_another_still_gets_its_quota_and_no_more",),
    ),
    Mutant(
        "free-keeps-an-old-end",
        "an id the owner frees is resumed above the moment it was freed, whatever an unfenced server "
        "issued after its lease had ended",
        "sql/registry/idgen_registry.sql",
        "           lease_ends_ms = now_ms - 1, fence_ms = coalesce(l.fence_ms, 0),",
        "           lease_ends_ms = LEAST(l.lease_ends_ms, now_ms - 1), fence_ms = coalesce(l.fence_ms, 0),",
        ("pg_test/test_registry.py::"
         "test_an_unfenced_lease_freed_long_after_it_ended_is_taken_above_the_moment_it_was_freed",),
    ),
    Mutant(
        "registry-epoch-ignored",
        "a registry serves one id space: a server of another idgen.epoch is refused, not given a worker id",
        "sql/registry/idgen_registry.sql",
        "    IF p_layout IS DISTINCT FROM served.layout OR p_epoch_ms IS DISTINCT FROM served.epoch_ms THEN",
        "    IF p_layout IS DISTINCT FROM served.layout THEN",
        ("pg_test/test_registry.py::test_a_registry_serves_one_epoch_and_refuses_a_server_of_another",),
    ),
    Mutant(
        "named-holder-keeps-the-id",
        "no member can keep an ended lease from a server by naming that server's system identifier",
        "sql/registry/idgen_registry.sql",
        "       AND (row_.lease_ends_ms >= now_ms\n            OR (row_.fence_ms IS NULL",
        "       AND (row_.lease_ends_ms >= now_ms\n"
        "            OR (row_.holder = p_holder AND row_.holder_role <> who)\n            OR (row_.fence_ms IS NULL",
        ("pg_test/test_registry.py::"
         "test_no_member_can_lock_a_server_out_of_its_worker_id_by_naming_its_system_identifier",),
    ),
    Mutant(
        "free-keeps-the-holder",
        "the owner's free() clears the holder, role, run and name it frees",
        "sql/registry/idgen_registry.sql",
        "       SET holder = NULL, holder_name = NULL, holder_role = NULL, holder_run = NULL,",
        "       SET holder_run = NULL,",
        ("pg_test/test_registry.py::"
         "test_no_member_can_lock_a_server_out_of_its_worker_id_by_naming_its_system_identifier",),
    ),
    Mutant(
        "report-bound-ten-minutes",
        "a member reports a horizon or fence no further ahead than a real server's could be",
        "sql/registry/idgen_registry.sql",
        "    IF coalesce(p_horizon_ms, 0) > now_ms + ahead + 1000",
        "    IF coalesce(p_horizon_ms, 0) > now_ms + 600000",
        ("pg_test/test_registry.py::"
         "test_no_member_can_make_the_next_holder_of_an_id_wait_by_reporting_a_horizon_far_ahead",),
    ),
    Mutant(
        "registry-term-unseen",
        "a registry failover to a standby that missed the last claims hands no held id out again",
        "sql/registry/idgen_registry.sql",
        "    IF new_cause IS NOT NULL THEN\n        -- One claim begins the term",
        "    IF false THEN\n        -- One claim begins the term",
        ("pg_test/test_registry.py::"
         "test_a_registry_failover_to_a_standby_that_missed_the_last_claims_stops_no_writer_and_makes_no_id_twice",
         "pg_test/test_chaos.py::test_a_short_schedule_with_a_fixed_seed_hands_out_no_id_twice"),
    ),
    Mutant(
        "restore-unseen",
        "a registry restored from a dump or started from an older copy of its data directory hands no held id out "
        "again",
        "sql/registry/idgen_registry.sql",
        "        WHEN (SELECT s.last_value FROM idgen_registry.incarnation AS s) <> here.incarnation THEN 2\n"
        "        WHEN (SELECT s.last_value FROM idgen_registry.started AS s) <> here.started_ms THEN 3 END;",
        "        END;",
        ("pg_test/test_registry_operations.py::"
         "test_a_registry_restored_from_a_dump_or_an_older_copy_gives_no_held_worker_id_to_another_server",
         "pg_test/test_chaos.py::test_a_short_schedule_with_a_fixed_seed_hands_out_no_id_twice"),
    ),
    Mutant(
        "hold-off-from-its-own-bounds-only",
        "a promoted or restored registry holds off for every lease it may have granted in the history it lost, "
        "under bounds raised in it too",
        "sql/registry/idgen_registry.sql",
        "    until_ms := now_ms + LEAST(c.max_lease_ms::bigint + c.max_grace_ms + GREATEST(now_ms - known_ms, 0),",
        "    until_ms := now_ms + LEAST(c.max_lease_ms::bigint + c.max_grace_ms,",
        ("pg_test/test_registry_operations.py::"
         "test_a_raise_of_the_bounds_that_a_failover_loses_is_still_covered_by_the_promoted_registrys_hold_off",),
    ),
    Mutant(
        "bounds-raised-at-once",
        "a raise of the registry's bounds takes effect only as long after it is made as it raises them",
        "sql/registry/idgen_registry.sql",
        "            NEW.raise_takes_effect_ms := now_ms + (wanted - grantable);",
        "            NEW.raise_takes_effect_ms := now_ms;",
        ("pg_test/test_registry_operations.py::"
         "test_a_raise_of_the_bounds_that_a_failover_loses_is_still_covered_by_the_promoted_registrys_hold_off",
         "pg_test/test_registry_operations.py::"
         "test_bounds_lowered_below_what_a_holder_holds_stop_no_server_and_a_raise_waits_as_long_as_it_raises"),
    ),
    Mutant(
        "one-connect-deadline-for-all-hosts",
        "each host of a multi-host idgen.registry gets its own connect deadline",
        "src/pg/libpq.rs",
        '        let Some(list) = hosts::split(value("host"), value("hostaddr"), value("port")) else {',
        "        let Some(list) = None::<Vec<hosts::Host>> else {",
        ("pg_test/test_registry_operations.py::"
         "test_a_black_holed_first_host_costs_each_connection_its_connect_timeout_and_the_live_host_is_reached",),
    ),
    Mutant(
        "grace-not-kept",
        "the id of a server issuing through its grace goes to no other server",
        "sql/registry/idgen_registry.sql",
        "    keep_ms := g_lease::bigint + g_grace;",
        "    keep_ms := g_lease::bigint;",
        ("pg_test/test_registry.py::"
         "test_a_server_cut_off_from_the_registry_issues_through_its_grace_and_its_id_goes_to_no_other_server",),
    ),
    Mutant(
        "grace-not-in-the-fence",
        "a server holding a lease issues through its grace while the registry is down or failing over",
        "src/core/src/lease.rs",
        "            .then(|| sent_ms.saturating_add(lease_ms).saturating_add(grace_ms))",
        "            .then(|| sent_ms.saturating_add(lease_ms))",
        ("pg_test/test_registry.py::"
         "test_writes_go_on_through_a_registry_outage_longer_than_the_lease_and_no_id_is_made_twice",
         "pg_test/test_registry_patroni.py::"
         "test_the_registry_on_patroni_with_synchronous_mode_loses_its_leader_under_three_writers_and_stops_none",
         "pg_test/test_citus.py::"
         "test_the_coordinator_down_for_two_minutes_with_the_registry_on_it_refuses_no_write_through_the_workers"),
    ),
    Mutant(
        "citus-check-off",
        "inside Citus with no registry, a node checks its worker id against the other nodes' before its first id",
        "src/pg/citus_peers.rs",
        "    if !CITUS.load(Ordering::Relaxed) || STATE.get().load(Ordering::Acquire) == CLEAR {\n",
        "    if true || STATE.get().load(Ordering::Acquire) == CLEAR {\n",
        ("pg_test/test_citus.py::"
         "test_without_the_registry_a_worker_given_another_nodes_worker_id_is_refused_naming_it_and_stores_no_id_twice",),
    ),
    Mutant(
        "registry-floor-unnamed",
        "a server held back by what the registry recorded names the registry and the holder, not its own clock",
        "src/pg/registry/state.rs",
        "    (info.floor_ms > 0).then(|| {",
        "    (info.floor_ms > u64::MAX).then(|| {",
        ("pg_test/test_registry.py::"
         "test_no_member_can_make_the_next_holder_of_an_id_wait_by_reporting_a_horizon_far_ahead",),
    ),
    Mutant(
        "reuse-floor-ignored",
        "a reused worker id resumes above everything its earlier holders issued",
        "src/pg/registry/worker.rs",
        "                    if opening && decision.resume_after_ms > 0 {",
        "                    if false && opening && decision.resume_after_ms > 0 {",
        ("pg_test/test_registry.py::test_a_killed_holders_id_is_reused_only_above_everything_it_stored",),
    ),
    Mutant(
        "generator-load-then-store",
        "every id is one fetch_add on the shared word: two backends never take the same value",
        "src/core/src/snowflake.rs",
        "        let mut value = state.word.0.fetch_add(1, Ordering::AcqRel);",
        "        let mut value = state.word.0.load(Ordering::Acquire);\n"
        "        std::thread::yield_now();\n"
        "        state.word.0.store(value + 1, Ordering::Release);",
        ("pg_test/test_generators.py::test_a_million_snowflake_ids_from_four_backends",),
    ),
    Mutant(
        "uuid7-word-per-backend",
        "uuid_v7() is ordered across every backend of a server that preloads idgen",
        "src/pg/shared.rs",
        "    if preloaded() {\n        UUID7.get()\n    } else {\n        &UUID7_LOCAL\n    }",
        "    &UUID7_LOCAL",
        ("pg_test/test_generators.py::test_uuid_v7_from_two_backends_called_in_turn",
         "pg_test/test_generators.py::test_uuid_v7_from_four_backends"),
    ),
    Mutant(
        "base62-key-shown-in-its-setting",
        "no role but the server's OS user reads the base62 key; pg_monitor sees its path only",
        "src/pg/settings.rs",
        "    let block = key_extra(&key);",
        "    let shown = std::ffi::CString::new(key.clone()).unwrap_or_default();\n"
        "    let copy = unsafe { libc::strdup(shown.as_ptr()) }; // 15 frees setting strings with free()\n"
        "    if !copy.is_null() {\n        unsafe { *newval = copy };\n    }\n"
        "    let block = key_extra(&key);",
        ("pg_test/test_base62_key_file.py::test_neither_an_ordinary_role_nor_a_pg_monitor_member_can_read_the_key",),
    ),
    Mutant(
        "portable-search-path-without-pg_temp",
        "the portable edition's SECURITY DEFINER function never runs a caller's pg_temp object",
        "sql/portable/idgen_portable.sql",
        "PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$",
        "PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog AS $fn$",
        ("pg_test/test_portable_security.py::test_a_temporary_domain_of_the_caller_never_runs_as_the_installer",
         "pg_test/test_portable_security.py::test_temporary_relations_named_like_the_state_are_not_used",
         "pg_test/test_portable_security.py::"
         "test_every_security_definer_function_pins_a_search_path_that_ends_with_pg_temp"),
    ),
    Mutant(
        "portable-clock-wait-skipped",
        "the portable snowflake_next() issues no id from a tick the clock has not reached: past a "
        "tick's cap, and after a step back, it waits for the clock",
        "sql/portable/idgen_portable.sql",
        "    EXIT WHEN NOT refused AND t OPERATOR(pg_catalog.<=) now_t;",
        "    EXIT WHEN NOT refused;",
        ("pg_test/test_portable.py::test_many_writers_clock_steps_and_a_burst_past_the_cap_never_repeat_an_id",),
    ),
    Mutant(
        "block-granted-twice",
        "the registry grants each block of a counter once: two servers never write the same code",
        "sql/registry/idgen_registry.sql",
        "        idx := pg_catalog.nextval(idgen_registry._counter_seq(k.name));",
        "        idx := n;",
        ("pg_test/test_short_codes.py::"
         "test_two_servers_with_a_registry_write_distinct_codes_where_their_sequences_both_write_000001",),
    ),
    Mutant(
        "block-rest-reissued-after-a-crash",
        "a server that crashed never issues the rest of its block again",
        "sql/registry/idgen_registry.sql",
        "        idx := pg_catalog.nextval(idgen_registry._counter_seq(k.name));",
        "        idx := CASE WHEN p_counter = 'links' AND n > 0 AND first_idx IS NULL THEN n - 1\n"
        "                    ELSE pg_catalog.nextval(idgen_registry._counter_seq(k.name)) END;",
        ("pg_test/test_short_codes.py::test_a_crashed_server_never_reissues_the_rest_of_its_block",),
    ),
    Mutant(
        "no-counter-jump-at-a-new-term",
        "a registry that lost the blocks it granted (a failover, a restore) never grants them again",
        "sql/registry/idgen_registry.sql",
        "    PERFORM idgen_registry._counters_jump(now_ms + c.max_clock_skew_ms);\n",
        "",
        ("pg_test/test_short_codes.py::test_a_registry_that_lost_the_blocks_it_granted_never_grants_them_again",),
    ),
    Mutant(
        "worker-code-block-not-flushed",
        "a worker code handed out is never handed out again after a crash, its transaction committed or not",
        "src/pg/worker_codes.rs",
        "    if let Err(e) = horizon_store::flush_wal() {",
        "    if let Err(e) = Ok::<(), std::io::Error>(()) {",
        ("pg_test/test_short_codes.py::test_a_crashed_server_never_reissues_a_worker_code_it_handed_out_"
         "in_a_transaction_that_never_committed",),
    ),
    Mutant(
        "worker-code-without-the-worker-id",
        "two servers without a registry never write the same worker code",
        "src/core/src/short_code.rs",
        "    Some(counter * workers + worker_id)",
        "    Some(counter * workers)",
        ("pg_test/test_short_codes.py::"
         "test_two_servers_without_a_registry_write_distinct_codes_that_carry_their_worker_ids",),
    ),
]


def apply(mutant, root):
    """Applies the mutant's edit under `root`; raises if its text is not there exactly once."""
    path = os.path.join(root, mutant.file)
    with open(path) as f:
        text = f.read()
    count = text.count(mutant.old)
    if count != 1:
        raise ValueError(f"mutant {mutant.name} no longer applies: its text occurs {count} times in "
                         f"{mutant.file} (update pg_test/mutants/mutants.py)")
    with open(path, "w") as f:
        f.write(text.replace(mutant.old, mutant.new))


def run(cmd, **kw):
    print("+", " ".join(cmd) if isinstance(cmd, list) else cmd, flush=True)
    return subprocess.run(cmd, **kw)


def first_failure(xml_path):
    """(test, seconds it ran) of the first test that failed or errored, or None."""
    if not os.path.exists(xml_path):
        return None
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            return f"{case.get('classname').replace('.', '/')}.py::{case.get('name')}", float(case.get("time"))
    return None


def copys_harness(args):
    """The environment that has the copy's tests and fault schedule run the copy's own harness
    package, ahead of the checkout's that the venv has installed: the package reads the tree
    it sits in (the fault schedule loads sql/registry/idgen_registry.sql from it), and a mutant
    may have changed that SQL in the copy."""
    return ["PYTHONDONTWRITEBYTECODE=1", f"PYTHONPATH={os.path.join(args.copy, 'benches')}"]


def schedule_seeds(m, args, pg_bin, venv, version):
    """The mutant (installed) against the fault schedule with many seeds: how many catch it."""
    import json
    fixed = fixed_seed()
    seeds = args.seeds or [fixed, *[s for s in range(1001, 1000 + args.schedule_seeds + 1) if s != fixed]][
        :args.schedule_seeds]
    secs = args.schedule_seconds
    rows = []
    for seed in seeds:
        out = os.path.join(args.copy, f"chaos-{seed}")
        os.makedirs(out, exist_ok=True)
        run(["chown", "postgres", out], check=True)
        started = time.monotonic()
        run(["runuser", "-u", "postgres", "--", "env", f"PG_BIN={pg_bin}", *copys_harness(args),
             f"{venv}/bin/python", "-m", "idgen_harness.chaos", "--seconds", str(secs), "--seed", str(seed),
             "--out", out, *args.chaos_args.split()],
            cwd=args.copy, capture_output=True)
        with open(os.path.join(out, "chaos.json")) as f:
            s = json.load(f)
        rows.append((seed, s, time.monotonic() - started))
        print(f"== seed {seed}: {s['violations']} violations", flush=True)
    caught = sum(1 for _, s, _ in rows if s["violations"])
    with open(args.out, "w") as f:
        how = (f"--seeds {','.join(map(str, seeds))} --schedule-seconds {secs}"
               + (f' --chaos-args "{args.chaos_args}"' if args.chaos_args else "")) if args.seeds \
            else f"--schedule-seeds {len(rows)}"
        what = (f"the 40-second schedule that `make test` runs, once per seed ({seeds[0]} is its fixed seed)"
                if secs == 40
                else f"the {secs}-second schedule ({args.chaos_args or 'chaos.py defaults'})")
        f.write(f"# `{m.name}` against the fault schedule, {len(rows)} seed{'s' if len(rows) > 1 else ''}\n\n"
                f"Written by `bash pg_test/mutants/run --only {m.name} {how}` on {version}, this project's 2-vCPU "
                f"machine: the planted bug built and installed, then {what}. **{caught} of {len(rows)} "
                f"seed{'s' if len(rows) > 1 else ''} caught it.**\n\n"
                "| seed | ids checked | violations | handed out twice or more | below an id handed out before it "
                "| w3 set back and crashed at, s | run, s |\n|---:|---:|---:|---:|---:|---:|---:|\n")
        for seed, s, took in rows:
            v = s.get("violations_by_kind", {})
            w3 = ", ".join(f"{f.at_s:.0f}" for f in chaos_schedule(seed, secs)
                           if (f.kind, f.target) == ("clock_back_crash", "w3"))
            f.write(f"| {seed} | {s['ids_checked']:,} | {s['violations']:,} | {v.get('handed out twice or more', 0):,} "
                    f"| {v.get('below an id handed out before it', 0):,} | {w3} | {took:.0f} |\n")
    print(f"{m.name}: {caught} of {len(rows)} seeds caught it; table in {args.out}")
    return 0


def fixed_seed():
    """make test's fixed seed, FIXED_SEED in pg_test/test_chaos.py."""
    with open(os.path.join(ROOT, "pg_test", "test_chaos.py")) as f:
        return int(re.search(r"^FIXED_SEED = (\d+)", f.read(), re.M).group(1))


def chaos_schedule(seed, seconds=40):
    """The faults the schedule draws for a seed (idgen_harness.chaos)."""
    from idgen_harness import chaos
    return chaos.schedule(seed, seconds)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", default=[], help="run this mutant only (repeatable)")
    ap.add_argument("--copy", default="/tmp/idgen-mutant", help="where the mutated copy is built")
    ap.add_argument("--out", default=os.path.join(HERE, "results.md"))
    ap.add_argument("--schedule-seeds", type=int, default=0, metavar="N",
                    help="instead of the guarding tests: the --only mutant against the fault schedule's "
                         "40-second run with N seeds (the first is make test's fixed one), a table to --out")
    ap.add_argument("--seeds", type=lambda v: [int(x) for x in v.split(",")], default=None,
                    help="with the schedule: these seeds (comma-separated) instead of --schedule-seeds N's")
    ap.add_argument("--schedule-seconds", type=int, default=40, help="with the schedule: its length, s")
    ap.add_argument("--chaos-args", default="", help="with the schedule: more chaos.py arguments, e.g. "
                    "\"--rate 300 --pause-ms 5 --mean-gap 4\"")
    args = ap.parse_args(argv)
    if args.seeds:
        args.schedule_seeds = len(args.seeds)
    pg_config, venv = os.environ["PG_CONFIG"], os.environ["VENV"]
    pg_bin = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
    version = subprocess.run([pg_config, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    rows = []
    for m in chosen:
        shutil.rmtree(args.copy, ignore_errors=True)
        run(["rsync", "-a", "--exclude", "target", "--exclude", ".pg", "--exclude", ".venv", "--exclude", ".git",
             "--exclude", ".bench", "--exclude", ".pgdata", f"{ROOT}/", f"{args.copy}/"], check=True)
        apply(m, args.copy)
        started = time.monotonic()
        build = run(["bash", "-c", 'source pg_test/install.sh && stop_running_clusters && cd "$1" && '
                     'CARGO_TARGET_DIR="$2" CARGO_PROFILE_RELEASE_LTO=off CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 '
                     'cargo pgrx install --release --features test_clock --pg-config "$PG_CONFIG" >/dev/null',
                     "-", args.copy,
                     os.path.join(ROOT, "target", "mutants")], cwd=ROOT)
        if build.returncode != 0:
            rows.append((m, "the mutant did not build", None, None))
            continue
        build_s = time.monotonic() - started
        run(["chown", "-R", "postgres", args.copy], check=True)
        if args.schedule_seeds:
            return schedule_seeds(m, args, pg_bin, venv, version)
        xml = os.path.join(args.copy, "mutant.xml")
        started = time.monotonic()
        tests = run(["runuser", "-u", "postgres", "--", "env", f"PG_BIN={pg_bin}", *copys_harness(args),
                     f"{venv}/bin/python", "-m", "pytest", "-c", "pg_test/pytest.ini", "--rootdir=.",
                     "-p", "no:cacheprovider", "-p", "no:xdist", "-x", f"--junitxml={xml}", *m.tests],
                    cwd=args.copy)
        took = time.monotonic() - started
        caught = first_failure(xml) if tests.returncode == 1 else None
        rows.append((m, caught, took, build_s))
        print(f"== {m.name}: {'caught by ' + caught[0] if caught else 'NOT CAUGHT'} ({took:.0f} s)", flush=True)
    with open(args.out, "w") as f:
        f.write(f"# Planted bugs and the tests that catch them\n\nWritten by `make mutants` "
                f"(pg_test/mutants/run) on {version}, this project's 2-vCPU machine. Each mutant is one edit "
                f"(pg_test/mutants/mutants.py) applied to a copy of the checkout, built and installed; its "
                f"guarding tests run against it, stopping at the first failure. \"Time\" is from the "
                f"tests' start to the end of the first that failed, the servers' set-up included.\n\n"
                f"| mutant | the guarantee it removes | caught by | time |\n|---|---|---|---:|\n")
        for m, caught, took, _ in rows:
            if isinstance(caught, tuple):
                f.write(f"| `{m.name}` | {m.guarantee} | `{caught[0]}` | {took:.0f} s |\n")
            else:
                f.write(f"| `{m.name}` | {m.guarantee} | **not caught** ({caught or 'all its tests passed'}) | "
                        f"{'' if took is None else f'{took:.0f} s'} |\n")
    missed = [m.name for m, caught, _, _ in rows if not isinstance(caught, tuple)]
    print(f"mutants: {len(rows) - len(missed)} of {len(rows)} caught; table in {args.out}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
