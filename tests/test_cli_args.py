"""`scvd`'s command line: the service's plain `scvd run` skips building the parser, with the same result."""

from __future__ import annotations

import pytest

from scvd import cli


@pytest.mark.parametrize("argv", [[], ["run"]])
def test_the_plain_run_command_lines_parse_as_argparse_would(argv):
    assert vars(cli.parse_args(argv)) == vars(cli.build_parser().parse_args(argv))


@pytest.mark.parametrize("argv, expected", [
    (["run", "-v"], {"command": "run", "daemon": False, "pid_file": None, "verbose": True}),
    (["run", "--daemon"], {"command": "run", "daemon": True, "pid_file": None}),
    (["check-config"], {"command": "check-config", "strict": False}),
    (["check-config", "--strict"], {"command": "check-config", "strict": True}),
])
def test_every_other_command_line_goes_through_the_parser(argv, expected):
    assert vars(cli.parse_args(argv)) == expected


def test_a_bad_command_line_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(["run", "--no-such-option"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --no-such-option" in capsys.readouterr().err


def test_a_pid_file_without_daemon_is_a_usage_error_not_ignored(capsys, tmp_path):
    """A foreground scvd writes no pid file: a supervisor told to read one waited on nothing."""
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(["run", "--pid-file", str(tmp_path / "scvd.pid")])
    assert exc.value.code == 2
    assert "--pid-file needs --daemon" in capsys.readouterr().err
    assert not (tmp_path / "scvd.pid").exists()


@pytest.mark.parametrize("argv", [["--config", "", "check-config"], ["run", "--config="]])
def test_an_empty_config_path_is_a_usage_error_not_the_current_directory(capsys, argv):
    """`--config "$UNSET"` read the current directory as the config file."""
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(argv)
    assert exc.value.code == 2
    assert ("argument --config: an empty path names no config file; give the file's path, or leave --config "
            "out") in capsys.readouterr().err


def test_a_log_line_longer_than_journald_reads_whole_is_cut_in_its_middle_under_journald():
    """journald splits a line at LineMax (48K bytes) and reads a `<N>` at the start of the next piece
    as its priority: a peer's text padded to the cut (a client's name, an approval id it sent) forged
    a record of its own, at `<0>` (emergency: broadcast to every terminal)."""
    import logging

    padded = "x" * (48 * 1024 - 40) + "<0>scvd.server: approval a1 approved" + "y" * 60_000 + "end"
    record = logging.LogRecord("scvd.server", logging.WARNING, __file__, 1, "refused %s", (padded,), None)
    line = cli._JournalFormatter(journal=True).format(record)
    assert line.startswith("<4>WARNING scvd.server: refused xxx") and line.endswith("yyyend")
    assert len(line.encode()) < 48 * 1024 and "<0>" not in line
    assert "chars cut: journald splits longer lines" in line
    assert cli._JournalFormatter(journal=False).format(record).endswith(padded)  # a terminal gets it whole
