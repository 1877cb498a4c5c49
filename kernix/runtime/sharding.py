"""Running a kernel per shard: ``custom_partitioning`` with a rule from the signature.

The ``...`` batch dimensions of a signature are independent problems, so a
kernel may run on each shard of them.  Every other (core) dimension is a
``need_replication`` factor: the kernel sees it whole.  Partitioning is used
only when every output has ``...`` (an output without would be a reduction
over the batch, which a foreign kernel cannot be split into) and at least one
input has; with one device, and inside ``jax.shard_map`` (where each device
already holds its own shard), the plain call is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    from .operation import Operation

__all__ = ["partitioned", "sharding_rule"]


def _shardable(op: "Operation") -> bool:
    sig = op.signature
    return all(g.batch for g in sig.outputs) and any(g.batch for g in sig.inputs)


def sharding_rule(op: "Operation", ranks: Sequence[int]) -> tuple[list[list[str]], list[list[str]], list[str]]:
    """Factor names of each input and output, and the core factors.

    ``ranks`` are the input ranks; the batch rank is that of the ``...`` inputs.
    Batch factors are ``b0, b1, ...``; a named core dimension ``n`` is ``d_n``;
    an integer one gets a factor of its own.
    """
    sig = op.signature
    n_batch = next(r - len(g.dims) for g, r in zip(sig.inputs, ranks) if g.batch)
    batch = [f"b{i}" for i in range(n_batch)]
    core: dict[str, None] = {}
    counter = iter(range(10**6))

    def factors(group: Any) -> list[str]:
        names = []
        for d in group.dims:
            name = f"d_{d}" if isinstance(d, str) else f"c{next(counter)}"
            core.setdefault(name)
            names.append(name)
        return (batch if group.batch else []) + names

    ins = [factors(g) for g in sig.inputs]
    outs = [factors(g) for g in sig.outputs]
    return ins, outs, list(core)


def partitioned(op: "Operation", ffi: Callable[..., tuple[Any, ...]]) -> Callable[..., tuple[Any, ...]]:
    """``ffi`` partitioned along the batch dimensions when several devices are in use."""
    import jax

    from .varying import in_shard_map

    if not _shardable(op) or jax.device_count() < 2:
        return ffi
    cache: dict[tuple[int, ...], Any] = {}

    def call(*xs: Any) -> tuple[Any, ...]:
        if in_shard_map(xs):  # each device already has its own shard
            return ffi(*xs)
        ranks = tuple(len(jax.numpy.shape(x)) for x in xs)
        cp = cache.get(ranks)
        if cp is None:
            cp = cache[ranks] = _make(op, ffi, ranks)
        return cp(*xs)

    return call


def _make(op: "Operation", ffi: Callable[..., tuple[Any, ...]], ranks: tuple[int, ...]) -> Any:
    from jax.experimental.custom_partitioning import ArrayMapping, SdyShardingRule, custom_partitioning
    from jax.sharding import NamedSharding, PartitionSpec

    sig = op.signature
    ins, outs, core = sharding_rule(op, ranks)
    n_batch = next(len(f) - len(g.dims) for f, g in zip(ins, sig.inputs) if g.batch)
    rule = SdyShardingRule(
        tuple(ArrayMapping(*f) for f in ins),
        tuple(ArrayMapping(*f) for f in outs),
        need_replication_factors=tuple(core),
    )
    first = next(i for i, g in enumerate(sig.inputs) if g.batch)

    def batch_spec(arg_shapes: Any) -> tuple[Any, ...]:
        sharding = arg_shapes[first].sharding
        spec = tuple(getattr(sharding, "spec", ())) + (None,) * n_batch
        return spec[:n_batch]

    def shardings(mesh: Any, arg_shapes: Any) -> tuple[list[Any], list[Any]]:
        b = batch_spec(arg_shapes)

        def make(group: Any) -> Any:
            lead = b if group.batch else ()
            return NamedSharding(mesh, PartitionSpec(*lead, *([None] * len(group.dims))))

        return [make(g) for g in sig.inputs], [make(g) for g in sig.outputs]

    def infer(mesh: Any, arg_shapes: Any, result_shape: Any) -> Any:
        return tuple(shardings(mesh, arg_shapes)[1])

    def partition(mesh: Any, arg_shapes: Any, result_shape: Any) -> Any:
        in_sh, out_sh = shardings(mesh, arg_shapes)

        def lower(*xs: Any) -> tuple[Any, ...]:
            return tuple(ffi(*xs))

        return mesh, lower, tuple(out_sh), tuple(in_sh)

    cp = custom_partitioning(lambda *xs: tuple(ffi(*xs)))
    cp.def_partition(partition, infer_sharding_from_operands=infer, sharding_rule=rule)
    return cp
