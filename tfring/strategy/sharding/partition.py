"""Which rank owns which variable's optimizer state: whole variables, balanced by bytes.

Whole variables (as PyTorch's ZeroRedundancyOptimizer gives them) rather than one flat buffer cut
in N even parts (as DeepSpeed does): every Keras optimizer then updates a variable exactly as it
does unsharded, also those whose update needs the whole variable (per-variable norms in LARS and
Lamb, `clipnorm`, `exclude_from_weight_decay`), and no optimizer needs to learn about slices. The
price is balance: a rank holds at most the largest variable more than an even share.
"""


def owners(byte_sizes, size):
    """The owner rank of each variable, the same on every rank.

    Largest variables first (ties: the earlier one), each to the rank holding the fewest bytes so
    far (ties: the lower rank).

    Args:
        byte_sizes: each variable's bytes, in the optimizer's order.
        size: the number of ranks.

    Returns:
        A list of ranks, one per variable.

    Example:

    >>> owners([400, 100, 100, 100, 100], 2)
    [0, 1, 1, 1, 1]
    """
    loads = [0] * size
    result = [0] * len(byte_sizes)
    for k in sorted(range(len(byte_sizes)), key=lambda k: (-byte_sizes[k], k)):
        rank = min(range(size), key=lambda r: (loads[r], r))
        result[k] = rank
        loads[rank] += byte_sizes[k]
    return result
