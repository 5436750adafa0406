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
- What tfring does not have yet raises NotImplementedError naming it (Adasum, process sets other
  than the global one, `join`, elastic). Arguments about placement and
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

    Args:
        func: a function (cloudpickle-able, as Horovod requires).
        args, kwargs: what `func` is called with on every rank.
        np: the number of processes.
        start_timeout: seconds each rank has to join.
        verbose: passes `--verbose` to `tfring run`.
        use_gloo, use_mpi: accepted and ignored (tfring's ranks talk over its own ring).
        hosts, hostfile, min_np, max_np, ... : other hosts and elastic jobs are not supported here
            (NotImplementedError); use `tfring run -H ...` for several hosts.

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
