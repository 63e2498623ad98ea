"""Which candidates a benchmark runs: `--candidates` names and groups, turned into peers.

Every candidate is a peer (`dycl_iree.bench.peers`); a group names several (`peers`, `dycl`,
`all`, from each peer's `group`). Eager always comes first, because every speedup and every
correctness check is relative to it.

Example:
    >>> [factory().name for factory in resolve_candidates(["onnxruntime"])]
    ['eager', 'onnxruntime']
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .errors import BenchError
from .peers import PEERS, Peer

PeerFactory = Callable[[], Peer]
"""A Peer class, or anything else that makes a fresh peer when called (one per model)."""

CANDIDATES: dict[str, PeerFactory] = {factory().name: factory for factory in PEERS}
"""The built-in peers by candidate name, in report order."""

CANDIDATE_GROUPS: dict[str, list[str]] = {
    "all": list(CANDIDATES),
    **{
        group: [name for name, factory in CANDIDATES.items() if factory().group == group]
        for group in dict.fromkeys(factory().group for factory in PEERS)
    },
}
"""Names `--candidates` accepts besides single candidate names: `all`, `peers`, `dycl`."""


def resolve_candidates(selection: Iterable[str | PeerFactory] | None, device: str = "cpu") -> list[PeerFactory]:
    """Turn names, group names and Peer classes into peer factories, eager first, each once.

    None means every built-in peer that runs on `device`; a group keeps only those too (a named
    candidate is kept, and reported failed where it cannot run).

    >>> [factory().name for factory in resolve_candidates(["dycl"], device="cuda")]
    ['eager', 'dycl-compiled-cuda', 'dycl-python-cuda']
    """
    chosen: list[PeerFactory] = [CANDIDATES["eager"]]
    names = {"eager"}
    for item in selection if selection is not None else ["all"]:
        if not isinstance(item, str):
            found = [item]
        elif item in CANDIDATE_GROUPS:
            found = [CANDIDATES[name] for name in CANDIDATE_GROUPS[item] if device in CANDIDATES[name]().devices]
        elif item in CANDIDATES:
            found = [CANDIDATES[item]]
        else:
            known = ", ".join([*CANDIDATES, *CANDIDATE_GROUPS])
            raise BenchError(f"unknown candidate {item!r}; known: {known}")
        for factory in found:
            name = factory().name
            if name not in names:
                chosen.append(factory)
                names.add(name)
    return chosen
