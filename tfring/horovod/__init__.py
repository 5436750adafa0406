"""Horovod's API on tfring: a Horovod script runs with its import line changed.

    import tfring.horovod.tensorflow.keras as hvd     # was: import horovod.tensorflow.keras as hvd
    import tfring.horovod.tensorflow as hvd           # was: import horovod.tensorflow as hvd
    import tfring.horovod.keras as hvd                # was: import horovod.keras as hvd

and is launched by `tfring run -np 4 python train.py` (horovodrun's place). Horovod's semantics,
not `RingStrategy`'s: every process trains plain Keras on its own batch (the per-rank batch), and
`hvd.DistributedOptimizer` (or `hvd.DistributedGradientTape`) averages the gradients over the
ranks before they are applied. The gradients travel as `RingStrategy`'s do: in buckets, through the
same reduction (`tfring.strategy.gradients.reduction`), identical on every rank.

Differences from Horovod, on purpose:
- `hvd.callbacks.BroadcastGlobalVariablesCallback` broadcasts when training begins (Keras 3 builds
  the optimizer's variables before the first step), not after the first batch, so every rank's
  first step already starts from the root's weights.
- `hvd.broadcast_object` / `hvd.allgather_object` carry any picklable object, as Horovod's, but
  signed: each rank signs what it pickles with the job secret (HMAC-SHA256) and receivers check
  the signature before unpickling, so nothing a process outside the job sends is ever unpickled.
- Process sets (`hvd.ProcessSet`, `hvd.add_process_set`, `process_set=`) are tfring's process sets
  (`tfring.ops.add_process_set`): each set's members run its collectives on a ring of their own.
  Sets may be added after `hvd.init` without `HOROVOD_DYNAMIC_PROCESS_SETS`; an MPI communicator
  is refused (tfring has no MPI inside it).
- `hvd.join` has Horovod's semantics (`tfring.ops.join`): until every rank has joined, a joined
  rank adds zeros to the others' allreduces, and other collectives fail on the ranks that call them.
- `hvd.elastic`'s state objects (`KerasState`, `TensorFlowState`, `ObjectState`), callbacks and
  `run` work as Horovod's under `tfring run --min-np A --max-np B` (`tfring.elastic`): a lost rank
  or host, or added hosts, start the job's ranks again, and `run` goes on from the newest commit.
- `op=hvd.Adasum` works in `hvd.allreduce` and the Keras `DistributedOptimizer` and gradient tape
  (Horovod's semantics: a power of two of ranks); not with TF1 `tf.compat.v1.train` optimizers.
- What tfring does not have raises NotImplementedError naming it: `hvd.init(comm=...)`,
  `hvd.start_timeline` (the timeline is `tfring run --timeline-filename`, for the whole job), and
  `run` on other hosts or as an elastic job. Arguments about placement and
  grouping (`device_dense`, `device_sparse`, `groups`, `num_groups`, `name`, `use_locking`) are
  accepted and ignored: tfring places collectives with their inputs and groups gradients in buckets.
- Keras on a GPU host compiles `fit`'s step with XLA by default (`jit_compile="auto"` is True
  without a distribution strategy), and tfring's collectives have no XLA kernel: compile with
  `jit_compile=False` (the error says so).

Gradient conventions: in this package they are Horovod's (an allgather's or a broadcast's gradient
is averaged over the ranks; a reducescatter's is the gathered gradient, times the number of ranks
for `hvd.Sum`); in `tfring.ops` they are exact for a sum of the ranks' losses. See each function.
"""


def run(func, args=(), kwargs=None, np=1, min_np=None, max_np=None, slots=None, reset_limit=None,
        cooldown_range=None, hosts=None, hostfile=None, start_timeout=None, ssh_port=None,
        ssh_identity_file=None, disable_cache=None, output_filename=None, verbose=None, use_gloo=None,
        use_mpi=None, mpi_args=None, network_interface=None, executable=None):
    """Runs `func(*args, **kwargs)` in `np` processes on this host (Horovod's `horovod.run`, on `tfring.run`).

    Other hosts and elastic jobs are not supported here: `hosts` other than `localhost`,
    `hostfile`, `min_np`, `max_np`, `slots`, `reset_limit`, `cooldown_range` and `executable`
    raise NotImplementedError (`tfring run -H ...` starts a job on several hosts). The other
    arguments of Horovod's (`ssh_port`, `ssh_identity_file`, `disable_cache`, `output_filename`,
    `mpi_args`, `network_interface`) are accepted and ignored.

    Args:
        func: a function (cloudpickle-able, as Horovod requires).
        args: the positional arguments `func` is called with on every rank.
        kwargs: its keyword arguments (a dict), the same on every rank.
        np: the number of processes.
        start_timeout: seconds each rank has to join.
        verbose: passes `--verbose` to `tfring run`.
        use_gloo: accepted and ignored (tfring's ranks talk over its own ring).
        use_mpi: accepted and ignored, as `use_gloo`.

    Raises:
        NotImplementedError: another host, a host file, or an elastic job's arguments.

    Returns:
        The list of the ranks' return values, by rank.

    Example:

    >>> import tfring.horovod as horovod
    >>> horovod.run(train, np=2)
    """
    from tfring.launch import function_launcher

    unsupported = {"hosts": hosts, "hostfile": hostfile, "min_np": min_np, "max_np": max_np, "slots": slots,
                   "reset_limit": reset_limit, "cooldown_range": cooldown_range, "executable": executable}
    given = sorted(k for k, v in unsupported.items() if v is not None and not (k == "hosts" and
                                                                             str(v).split(":")[0] == "localhost"))
    if given:
        raise NotImplementedError(f"tfring.horovod.run: {', '.join(given)} not supported; it runs on this host "
                                  f"(tfring run -H/--hostfile starts jobs on several hosts)")
    launcher_args = ["--verbose"] if verbose else []
    env = {"TFRING_RENDEZVOUS_TIMEOUT": str(start_timeout)} if start_timeout else None
    return function_launcher.run(func, np=np, args=args, kwargs=kwargs, env=env, launcher_args=launcher_args)
