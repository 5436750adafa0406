"""`tfring run` reads horovodrun's flags and HOROVOD_* variables (parsed only; no job starts)."""

import argparse

from tfring import cli


def _parse(argv):
    parser = argparse.ArgumentParser()
    cli._run_arguments(parser)
    return parser.parse_args(argv)


def test_horovodruns_flags_are_accepted(monkeypatch, capsys, tmp_path):
    args = _parse(["-np", "2", "-H", "localhost:2", "-p", "2222", "-i", "/k", "--start-timeout", "5",
                   "--timeline-filename", str(tmp_path / "t.json"), "--verbose", "--gloo", "python", "x.py"])
    assert (args.np, args.ssh_port, args.ssh_identity_file, args.start_timeout) == (2, 2222, "/k", 5.0)
    monkeypatch.setenv("HOROVOD_CYCLE_TIME", "1")
    options = cli._run_options(args)
    assert options.exports["TFRING_TIMELINE"] == str(tmp_path / "t.json")
    err = capsys.readouterr().err
    assert "--gloo ignored" in err and "HOROVOD_CYCLE_TIME" in err and "2 ranks on localhost:2" in err
