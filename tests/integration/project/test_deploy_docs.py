"""The README and docs/, checked where they can be without a cloud account.

Every ``make`` command they name (in a shell block or inline) names a real target and
only variables the Makefile reads (upper case) or parameters of the pipeline it runs
(lower case); the shell blocks' ``make`` commands expand under ``make -n`` into a
``python -m spottrain.pipelines`` command the CLI parses, and their ``python -m
spottrain.…`` commands parse; the Python compiles; the deploy page's names (image,
registry, identities) agree; every link to a page of docs/ resolves.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from doc_commands import check_make_names, commands

from spottrain.pipelines import __main__ as cli

REPO = Path(__file__).resolve().parents[3]


MAKE_COMMANDS = [c[1:] for c in commands() if c[0] == "make"]


@pytest.mark.parametrize("argv", MAKE_COMMANDS, ids=[" ".join(c)[:50] for c in MAKE_COMMANDS])
def test_make_commands_name_real_targets_and_variables(argv):
    target, *assignments = argv
    assert all("=" in a for a in assignments), assignments
    check_make_names(target, assignments)
    # What make would run: a CLI command that parses (dry run; no request is made).
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", *argv], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    for line in result.stdout.splitlines():
        if "-m spottrain.pipelines" not in line:
            continue  # other recipe lines (tool builds) are shell, not a CLI call
        words = shlex.split(line)
        if words[1:3] == ["-m", "spottrain.pipelines"]:
            cli.parser().parse_args(words[3:])  # SystemExit(2) on a bad argument
