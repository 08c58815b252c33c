"""Trees of kept signals for the scheduler's wide selections: synthesis maps the logic on either
side of a kept signal separately, which bounds the LUT levels of the paths through them."""

from amaranth.hdl import Array, Cat, Const, Signal

__all__ = ["kept", "mux_tree", "first_one", "lowest_one"]


def kept(m, value, name):
    """``value`` through a signal that synthesis keeps: the logic on either side is mapped
    separately, which bounds the LUT levels of a path through it."""
    sig = Signal.like(value, name=name, attrs={"keep": 1}) if isinstance(value, Signal) else \
        Signal(len(value), name=name, attrs={"keep": 1})
    m.d.comb += sig.eq(value)
    return sig


def mux_tree(m, values, index, name):
    """``values[index]`` (single bits) as a tree of 4:1 multiplexers whose outputs synthesis
    keeps."""
    values = list(values)
    k = 0
    while len(values) > 1:
        nxt = []
        for g in range(0, len(values), 4):
            group = values[g:g + 4]
            sig = Signal(name=f"{name}_m{k}_{g // 4}", attrs={"keep": 1})
            if len(group) == 1:
                m.d.comb += sig.eq(group[0])
            else:
                m.d.comb += sig.eq(Array(group)[index[2 * k:2 * k + 2]])
            nxt.append(sig)
        values = nxt
        k += 1
    return values[0]


def first_one(m, leaves, name="ff"):
    """The first of a list of 4^k leaves ``(valid, payload)`` that is valid: (any valid, its
    position, its payload), as a tree of 4-input nodes whose outputs synthesis keeps."""
    if len(leaves) == 1:
        return leaves[0][0], Const(0, 0), leaves[0][1]
    q = len(leaves) // 4
    kids = [first_one(m, leaves[k * q:(k + 1) * q], f"{name}{k}") for k in range(4)]
    anys = [a for a, _, _ in kids]
    first = Signal(2, name=f"{name}_f", attrs={"keep": 1})
    with m.If(anys[0]):
        m.d.comb += first.eq(0)
    with m.Elif(anys[1]):
        m.d.comb += first.eq(1)
    with m.Elif(anys[2]):
        m.d.comb += first.eq(2)
    with m.Else():
        m.d.comb += first.eq(3)
    low = Signal(len(kids[0][1]) + len(kids[0][2]))
    with m.Switch(first):
        for k in range(4):
            with m.Case(k):
                m.d.comb += low.eq(Cat(kids[k][1], kids[k][2]))
    pos = kept(m, Cat(low[:len(kids[0][1])], first), f"{name}_p")
    payload = kept(m, low[len(kids[0][1]):], f"{name}_d") if len(kids[0][2]) else Const(0, 0)
    any_ = kept(m, anys[0] | anys[1] | anys[2] | anys[3], f"{name}_a")
    return any_, pos, payload


def lowest_one(m, bits, name="low"):
    """The lowest set bit of the ``n``-bit value ``bits``: (any set, its index in
    ``max(1, (n - 1).bit_length())`` bits), as :func:`first_one`'s tree (padded to 4^k leaves)."""
    n = len(bits)
    size = 1
    while size < n:
        size *= 4
    leaves = [(bits[k], Const(0, 0)) for k in range(n)] + [(Const(0), Const(0, 0))] * (size - n)
    found, pos, _ = first_one(m, leaves, name)
    qb = max(1, (n - 1).bit_length())
    return found, (pos[:qb] if len(pos) >= qb else Cat(pos, Const(0, qb - len(pos))))
