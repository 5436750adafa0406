"""The `tfring` command line: `tfring run -np N COMMAND ...`, `tfring convert SOURCE PREFIX` and
`tfring doctor`."""

import argparse
import difflib
import sys


class _SubcommandParser(argparse.ArgumentParser):
    """A subcommand's parser that refuses an unknown option itself, so the error shows its usage.

    argparse hands a subcommand's unknown options up to the top-level parser, whose error shows
    `usage: tfring [-h] {run,convert} ...`: no help for `tfring run --all-ouput python x.py`.
    """

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}{self._suggestion(extras[0])}")
        return namespace, extras

    def _suggestion(self, unknown):
        """The hint after the error, e.g. ' (did you mean --all-output?)', or '' when no option is close."""
        options = [o for action in self._actions for o in action.option_strings]
        close = difflib.get_close_matches(unknown.split("=", 1)[0], options, n=1)
        return f" (did you mean {close[0]}?)" if close else ""


def _parser():
    parser = argparse.ArgumentParser(prog="tfring", description="Data-parallel training for Keras 3 / TensorFlow.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_SubcommandParser)
    run = sub.add_parser("run", help="start N ranks of COMMAND on this host or on several",
                         description="Start N ranks of COMMAND, on this host or over ssh on several, "
                                     "and supervise them.")
    _run_arguments(run)
    convert = sub.add_parser("convert", help="convert a dataset into sharded TFRecord files",
                             description="Convert a dataset into PREFIX-00000-of-0000N.tfrecord shards and "
                                         "PREFIX.meta.json (read them with tfring.data.tfrecord_dataset).")
    convert.add_argument("source", help="a file (.npy .npz .csv .parquet .h5) or a folder (images, TIFF patches)")
    convert.add_argument("output_prefix", help="e.g. data/train (local, or s3://bucket/train with tensorflow-io)")
    convert.add_argument("--format", default="auto",
                         choices=["auto", "images", "numpy", "csv", "parquet", "hdf5", "tiff"])
    size = convert.add_mutually_exclusive_group()
    size.add_argument("--shard-size", default="128MB", help="target shard size (default 128MB)")
    size.add_argument("--num-shards", type=int, default=None, help="number of shards")
    convert.add_argument("--compression", default="none", choices=["none", "gzip", "zlib"])
    convert.add_argument("--workers", type=int, default=None, help="shards written in parallel (default: CPUs, <= 8)")
    convert.add_argument("--shuffle", action="store_true", help="shuffle the examples before sharding")
    convert.add_argument("--seed", type=int, default=None, help="the shuffle seed")
    convert.add_argument("--resume", action="store_true",
                         help="keep the complete, verified shards of an interrupted run with the same arguments")
    convert.add_argument("--skip-bad", action="store_true",
                         help="skip unreadable images/TIFFs (listed in the meta file) instead of failing")
    convert.add_argument("--label", default=None, help="the label column/array (default: 'label' when present)")
    convert.add_argument("--datasets", default=None, help="HDF5: comma-separated datasets to store (default: all)")
    convert.add_argument("--labels", default=None, help="TIFF: a CSV of file,label rows instead of class folders")
    convert.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    doctor = sub.add_parser("doctor", help="check that tfring can work here, and say what to fix",
                            description="Check the versions, the op library, the transports, launchers and "
                                        "job secret of this host (and with --self-test, a 2-rank job); "
                                        "exit 0 when nothing fails.")
    from tfring.doctor import report as doctor_report

    doctor_report.add_arguments(doctor)
    return parser


def _run_arguments(run):
    run.add_argument("-np", "--num-processes", dest="np", type=int, default=None,
                     help="number of ranks (default with -H/--hostfile: every slot)")
    where = run.add_mutually_exclusive_group()
    where.add_argument("-H", "--hosts", default=None, help="hosts and slots: host1:4,host2:4 (default: this host)")
    where.add_argument("--hostfile", default=None, help="a file of 'host slots=N' or 'host:N' lines")
    run.add_argument("-p", "--ssh-port", type=int, default=None, help="the port of sshd on the other hosts")
    run.add_argument("-i", "--ssh-identity-file", default=None, help="the private key ssh uses")
    run.add_argument("--rsh", default=None, help="the command that replaces 'ssh -o BatchMode=yes' "
                     "(the host and remote command follow it)")
    run.add_argument("-x", dest="exports", action="append", default=[], metavar="NAME[=VALUE]",
                     help="an environment variable for every rank (repeatable)")
    run.add_argument("--interface", default=None,
                     help="the network interface whose address each host advertises (sets TFRING_HOST)")
    run.add_argument("--start-timeout", type=float, default=30.0,
                     help="seconds every host has to answer before the start fails (default 30)")
    run.add_argument("--output-dir", default=None, help="also write each rank's output to DIR/rank.N.log")
    run.add_argument("--bind-to", default="none", choices=["none", "core"],
                     help="core: bind each rank to its share of its host's cores, so ranks do not "
                          "compete for them (default none)")
    run.add_argument("--timeline", "--timeline-filename", default=None, metavar="PATH",
                     help="each rank writes a Chrome-trace JSON of its collectives to PATH with .rankN before "
                          ".json (sets TFRING_TIMELINE)")
    run.add_argument("--timeout", type=float, default=None,
                     help="seconds a collective may stall before failing (sets TFRING_TIMEOUT)")
    run.add_argument("--all-output", action="store_true",
                     help="show every rank's stdout, and the ranks' stderr after Ctrl-C (default: rank 0's "
                          "stdout, every rank's stderr until Ctrl-C)")
    run.add_argument("--verbose", action="store_true", help="print the hosts, ranks and command before starting")
    _elastic_arguments(run)
    for flag in ("gloo", "mpi"):
        run.add_argument(f"--{flag}", action="store_true", help="horovodrun's flag: accepted and ignored, saying why")
    run.add_argument("program", nargs=argparse.REMAINDER, help="the command to run, e.g. python train.py")


def _elastic_arguments(run):
    group = run.add_argument_group("elastic jobs", "start the job again on the hosts left when a rank fails "
                                   "(any of these makes the job elastic)")
    group.add_argument("--min-np", type=int, default=None, help="the fewest ranks the job runs with")
    group.add_argument("--max-np", type=int, default=None,
                       help="the most ranks (default: -np, else every slot the hosts offer)")
    group.add_argument("--host-discovery-script", default=None, metavar="SCRIPT",
                       help="an executable printing the hosts now, one 'host:slots' per line (read again "
                            "before each start and while waiting for slots)")
    group.add_argument("--max-restarts", "--reset-limit", dest="max_restarts", type=int, default=None,
                       help="how many times the job may start again after a failure (default 3)")
    group.add_argument("--elastic-timeout", type=float, default=None,
                       help="seconds to wait for --min-np slots before failing (default 600)")
    group.add_argument("--blacklist-cooldown-range", type=float, nargs=2, default=None, metavar=("MIN", "MAX"),
                       help="seconds a failed host is kept out: MIN at its first failure, doubled at each "
                            "next one, at most MAX (default 10 300)")


def _elastic_options(args):
    """An `elastic.ElasticOptions` when any elastic flag is given, else None."""
    from tfring.launch import elastic

    given = {name: getattr(args, name) for name in ("min_np", "max_np", "host_discovery_script", "max_restarts",
                                                    "elastic_timeout", "blacklist_cooldown_range")}
    if all(value is None for value in given.values()):
        return None
    defaults = elastic.ElasticOptions()
    options = elastic.ElasticOptions(
        min_np=defaults.min_np if given["min_np"] is None else given["min_np"], max_np=given["max_np"],
        discovery_script=given["host_discovery_script"],
        max_restarts=defaults.max_restarts if given["max_restarts"] is None else given["max_restarts"],
        elastic_timeout=defaults.elastic_timeout if given["elastic_timeout"] is None else given["elastic_timeout"],
        cooldown=tuple(given["blacklist_cooldown_range"] or defaults.cooldown))
    if options.discovery_script and (args.hosts or args.hostfile):
        raise ValueError("give the hosts either with --host-discovery-script or with -H/--hostfile, not both")
    options.check()
    return options


def _run_options(args):
    """The launcher's options from the command line; ValueError names a bad one."""
    import os

    from tfring.launch import allocation
    from tfring.launch import forwarding
    from tfring.launch import horovod_habits
    from tfring.launch import hosts
    from tfring.launch import launcher

    for name in ("np", "timeout", "start_timeout"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            flag = {"np": "-np", "timeout": "--timeout", "start_timeout": "--start-timeout"}[name]
            raise ValueError(f"{flag} must be > 0, got {value:g}")
    host_list = hosts.parse_host_list(args.hosts) if args.hosts else None
    if args.hostfile:
        host_list = hosts.read_hostfile(args.hostfile)
    if host_list is None:
        host_list, source = allocation.allocation_hosts(os.environ)
        if host_list:
            listed = ", ".join(f"{h.name}:{h.slots}" for h in host_list)
            print(f"tfring run: using the hosts of this job's allocation ({source}): {listed}", file=sys.stderr)
    if args.np is None and host_list is None and not (args.host_discovery_script or args.max_np):
        raise ValueError("give -np N (and, for several hosts, -H or --hostfile)")
    horovod_exports, notes = horovod_habits.translate(os.environ)
    notes += [why for flag, why in horovod_habits.IGNORED_FLAGS.items() if getattr(args, flag)]
    for note in notes:
        print(note if note.startswith("tfring run:") else f"tfring run: {note}", file=sys.stderr)
    exports = forwarding.parse_exports(args.exports + _timeline_export(args.timeline), os.environ)
    if args.verbose:
        where = ", ".join(f"{h.name}:{h.slots}" for h in host_list) if host_list else "this host"
        print(f"tfring run: {args.np or 'every slot'} ranks on {where}; program: {' '.join(args.program)}",
              file=sys.stderr)
    return launcher.Options(
        timeout=args.timeout, all_output=args.all_output, hosts=host_list, rsh=args.rsh,
        ssh_port=args.ssh_port, ssh_identity_file=args.ssh_identity_file,
        exports={**horovod_exports, **exports},
        output_dir=args.output_dir,
        start_timeout=args.start_timeout, interface=args.interface, bind_to=args.bind_to)


def _timeline_export(path):
    """`--timeline PATH` as the export it stands for: an absolute path, since ranks may start in
    another directory; ranks on other hosts write to that path on their own host."""
    import os

    return [] if path is None else [f"TFRING_TIMELINE={os.path.abspath(os.path.expanduser(path))}"]


def _run(args):
    from tfring.launch import launcher

    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        print("tfring run: no command given (e.g. tfring run -np 2 python train.py)", file=sys.stderr)
        return 2
    try:
        elastic_options = _elastic_options(args)
        options = _run_options(args)
        return launcher.run(program, args.np, options, elastic_options)
    except ValueError as e:
        print(f"tfring run: {e}", file=sys.stderr)
        return 2
    except launcher.StartError as e:
        print(e, file=sys.stderr)
        return e.exit_code
    except OSError as e:  # an --output-dir that cannot be made, an address that cannot be bound
        print(f"tfring run: {e.strerror or e}{': ' + e.filename if getattr(e, 'filename', None) else ''}",
              file=sys.stderr)
        return 2


def _convert(args):
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tfring.data.sources import BadItem
    from tfring.data.writer import write_tfrecords

    try:
        write_tfrecords(args.source, args.output_prefix, format=args.format, shard_size=args.shard_size,
                        num_shards=args.num_shards, compression=args.compression, workers=args.workers,
                        shuffle=args.shuffle, seed=args.seed, resume=args.resume, skip_bad=args.skip_bad,
                        label=args.label, datasets=args.datasets.split(",") if args.datasets else None,
                        labels_file=args.labels, progress=not args.quiet)
    except (BadItem, ValueError, FileNotFoundError, ImportError, RuntimeError) as e:
        hint = " (--skip-bad skips unreadable items)" if isinstance(e, BadItem) else ""
        print(f"tfring convert: error: {e}{hint}", file=sys.stderr)
        return 1
    return 0


def main(argv=None):
    """Entry point of the `tfring` command; returns its exit code."""
    args = _parser().parse_args(argv)
    if args.command == "run":
        return _run(args)
    if args.command == "convert":
        return _convert(args)
    if args.command == "doctor":
        import os

        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        from tfring.doctor import report

        return report.main(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
