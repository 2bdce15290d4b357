"""Every planted bug of pg_test/mutants/mutants.py still applies to the sources as they are: its
text occurs exactly once, and each test that guards it exists. No server: this keeps `make
mutants` from rotting between its runs."""

import os
import re
import shutil

import mutants
import pytest


@pytest.mark.parametrize("mutant", mutants.MUTANTS, ids=[m.name for m in mutants.MUTANTS])
def test_the_mutant_applies_once_and_its_tests_exist(mutant, tmp_path):
    copy = tmp_path / "copy"
    os.makedirs(copy / os.path.dirname(mutant.file))
    shutil.copy(os.path.join(mutants.ROOT, mutant.file), copy / mutant.file)
    mutants.apply(mutant, str(copy))
    assert (copy / mutant.file).read_text() != open(os.path.join(mutants.ROOT, mutant.file)).read()
    for test in mutant.tests:
        path, name = test.split("::")
        with open(os.path.join(mutants.ROOT, path)) as f:
            assert re.search(rf"^def {name}\(", f.read(), re.M), f"{mutant.name}: no test {test}"


def test_a_mutant_whose_text_is_gone_is_refused(tmp_path):
    (tmp_path / "f.rs").write_text("fn a() {}\n")
    gone = mutants.Mutant("gone", "", "f.rs", "fn b() {}", "", ())
    with pytest.raises(ValueError, match="no longer applies"):
        mutants.apply(gone, str(tmp_path))


def test_names_are_unique():
    names = [m.name for m in mutants.MUTANTS]
    assert len(names) == len(set(names))
