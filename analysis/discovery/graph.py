"""The candidate edges of a construction's computational graph, and its weights' data flow among them.

Circuit-discovery methods (ACDC, edge attribution patching) work on the *computational graph* of a transformer:
source nodes are the residual input and every attention layer's and MLP's output; destination nodes are the
query, key and value inputs of every head, the input of every MLP and the readout. Because the residual stream is
a sum, every source that comes before a destination feeds it: that complete graph is the set of *candidate*
edges.

The *data-flow graph* is read block by block from the weights (:class:`~circuits.weights.BlockWeights` of the
construction), in the named subspaces of :class:`~circuits.layout.ResidualLayout`:

* a head **writes** subspace ``S`` when its OV circuit ``W_V W_O`` has a nonzero column block on ``S``; an MLP
  writes ``S`` when a unit whose gate and linear columns are not zero has a nonzero ``W_out`` row block on ``S``;
  the input writes the subspaces that the encoder fills;
* a head's **query** reads ``S`` when the QK circuit ``W_Q W_K^T`` has a nonzero row block on ``S``, its **key**
  when it has a nonzero column block, its **value** when ``W_V W_O`` has a nonzero row block; an MLP reads ``S``
  when a live unit's gate or linear column is nonzero on ``S``; the readout reads ``Y`` (the rows of ``W_U``) and
  ``C`` (what the decoder reads as the centroids);
* a subspace is **data** when the input carries different values on different problems (``X``, ``C_stage``) or
  a head or MLP writes it; the others (``ID``, ``ONE``, the flags) hold the same constants on every problem;
* an edge ``u -> v.port`` is **in the data flow** (:attr:`CircuitGraph.truth`, :attr:`CircuitGraph.circuit`)
  when ``u`` comes before ``v`` and some data subspace is written by ``u`` and read by ``v``'s port; the
  subspaces are kept on the edge (:attr:`Edge.subspaces`).

An edge outside the data flow has exactly no effect when patched with the corrupted run (the difference lives in
subspaces the port does not read, or in constants that are equal in both runs); an edge inside it may still have
none. What a task needs — the ground truth discovery is scored against — is proven per corruption family and
ablation kind in :mod:`analysis.discovery.truth`; a zero ablation can make an edge that carries only constants
matter. :attr:`Reads` (``CircuitGraph.io``) keeps the read and write sets, constants included: the weights-only
baseline and the truth's ``weights`` reason read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from circuits.layout import ResidualLayout
from circuits.weights import BlockWeights

#: The input ports of a head, the port of an MLP, and the readout's.
HEAD_PORTS: tuple[str, ...] = ("q", "k", "v")
MLP_PORT = "mlp"
OUT_PORT = "out"
INPUT = "in"
OUTPUT = "out"


def head_node(layer: int) -> str:
    return f"A{layer}"


def mlp_node(layer: int) -> str:
    return f"M{layer}"


def node_layer(node: str) -> int:
    """The block of a head or MLP node (``"A3"`` -> 3)."""
    return int(node[1:])


@dataclass(frozen=True)
class Edge:
    """Source ``src`` feeding port ``port`` of destination ``dst``; ``subspaces`` are the data subspaces the
    weights carry along it (empty for an edge outside the circuit)."""

    src: str
    dst: str
    port: str
    subspaces: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str, str]:
        return self.src, self.dst, self.port

    @property
    def label(self) -> str:
        return f"{self.src}->{self.dst}" if self.port in (MLP_PORT, OUT_PORT) else f"{self.src}->{self.dst}.{self.port}"


@dataclass
class Reads:
    """Which subspaces each node writes, and each (node, port) reads, at a tolerance."""

    writes: dict[str, set[str]] = field(default_factory=dict)
    reads: dict[tuple[str, str], set[str]] = field(default_factory=dict)


def _blocks_nonzero(M: np.ndarray, layout: ResidualLayout, axis: int, atol: float) -> set[str]:
    """The subspaces whose row block (``axis=0``) or column block (``axis=1``) of ``M`` holds an entry above atol."""
    out = set()
    for name in layout.names:
        block = M[layout[name], :] if axis == 0 else M[:, layout[name]]
        if block.size and np.abs(block).max() > atol:
            out.add(name)
    return out


def head_reads_writes(block: BlockWeights, layout: ResidualLayout, atol: float = 0.0) -> tuple[dict[str, set[str]], set[str]]:
    """``({"q": .., "k": .., "v": ..}, writes)`` of one head, in subspace names."""
    W_QK, W_OV = block.head.W_QK, block.head.W_OV
    reads = {"q": _blocks_nonzero(W_QK, layout, 0, atol), "k": _blocks_nonzero(W_QK, layout, 1, atol),
             "v": _blocks_nonzero(W_OV, layout, 0, atol)}
    return reads, _blocks_nonzero(W_OV, layout, 1, atol)


def mlp_reads_writes(block: BlockWeights, layout: ResidualLayout, atol: float = 0.0) -> tuple[set[str], set[str]]:
    """``(reads, writes)`` of one MLP: only units that compute something (gate and linear column nonzero) and
    write it somewhere (``W_out`` row nonzero) count."""
    mlp = block.mlp
    live = ((np.abs(mlp.W_gate).max(axis=0) > atol) & (np.abs(mlp.W_in).max(axis=0) > atol)
            & (np.abs(mlp.W_out).max(axis=1) > atol))
    if not live.any():
        return set(), set()
    reads = _blocks_nonzero(mlp.W_gate[:, live], layout, 0, atol) | _blocks_nonzero(mlp.W_in[:, live], layout, 0, atol)
    return reads, _blocks_nonzero(mlp.W_out[live, :], layout, 1, atol)


def input_subspaces(layout: ResidualLayout, n: int = 3, seed: int = 0) -> tuple[set[str], set[str]]:
    """``(written, data)``: the subspaces the encoder fills on some problem, and those whose values differ between
    two random problems of one shape (the rest are the encoder's constants)."""
    from circuits.encoding import encode

    rng = np.random.default_rng(seed)
    runs = [encode(layout, rng.normal(size=(n, layout.d)), rng.normal(size=(layout.k, layout.d))).resid[0].numpy()
            for _ in range(2)]
    written = {s for s in layout.names if any(np.abs(r[:, layout[s]]).max() > 0 for r in runs)}
    data = {s for s in layout.names if not np.array_equal(runs[0][:, layout[s]], runs[1][:, layout[s]])}
    return written, data


def readout_subspaces(W_U: np.ndarray, layout: ResidualLayout) -> set[str]:
    """What the readout reads: the unembedding's rows (the labels, ``Y``) and the decoder's centroids ``C``."""
    return _blocks_nonzero(W_U, layout, 0, 0.0) | {"C"}


@dataclass
class CircuitGraph:
    """The candidate edges of a circuit's computational graph and the ground truth among them.

    ``edges`` lists every candidate (source before destination) in a fixed order, each carrying the data
    subspaces of its flow; ``truth[i]`` says whether ``edges[i]`` is in the circuit. ``n_layers`` blocks,
    ``io`` the read/write sets it was derived from.
    """

    n_layers: int
    edges: list[Edge]
    io: Reads
    data: set[str]
    name: str = ""

    @property
    def truth(self) -> np.ndarray:
        return np.array([bool(e.subspaces) for e in self.edges])

    @property
    def circuit(self) -> list[Edge]:
        return [e for e in self.edges if e.subspaces]

    @property
    def sources(self) -> list[str]:
        return [INPUT] + [n for layer in range(self.n_layers) for n in (head_node(layer), mlp_node(layer))]

    def index(self) -> dict[tuple[str, str, str], int]:
        return {e.key: i for i, e in enumerate(self.edges)}

    def destinations(self) -> list[tuple[str, str]]:
        """Every (node, port) in forward order; the readout last."""
        out = []
        for layer in range(self.n_layers):
            out += [(head_node(layer), p) for p in HEAD_PORTS] + [(mlp_node(layer), MLP_PORT)]
        return out + [(OUTPUT, OUT_PORT)]

    def to_dict(self) -> dict:
        return {"name": self.name, "n_layers": self.n_layers, "data_subspaces": sorted(self.data),
                "edges": [{"src": e.src, "dst": e.dst, "port": e.port, "in_circuit": bool(e.subspaces),
                           "subspaces": list(e.subspaces)} for e in self.edges]}


def candidate_count(n_layers: int) -> int:
    """Candidate edges of ``n_layers`` blocks: block ``l`` has three head ports fed by ``1 + 2 l`` sources and an
    MLP fed by ``2 + 2 l``, and the readout is fed by all ``1 + 2 L``: ``4 L^2 + 3 L + 1``."""
    return 4 * n_layers**2 + 3 * n_layers + 1


def _order(node: str) -> float:
    """Position of a node in the forward pass (head before MLP within a block)."""
    if node == INPUT:
        return -1
    if node == OUTPUT:
        return float("inf")
    return 2 * node_layer(node) + (1 if node.startswith("M") else 0)


def graph_from_blocks(blocks: list[BlockWeights], layout: ResidualLayout, W_U: np.ndarray, atol: float = 0.0,
                      name: str = "", input_io: tuple[set[str], set[str]] | None = None) -> CircuitGraph:
    """The candidate edges and the circuit of a stack of blocks (see the module docstring); ``atol``: a weight
    entry of at most this magnitude counts as zero (0 for a construction: exact zeros); ``input_io``: the input's
    ``(written, data)`` subspaces when the input is not the encoder's (default :func:`input_subspaces`)."""
    io = Reads()
    written, data = input_io if input_io is not None else input_subspaces(layout)
    io.writes[INPUT] = written
    for layer, block in enumerate(blocks):
        head_reads, head_writes = head_reads_writes(block, layout, atol)
        io.writes[head_node(layer)] = head_writes
        for port, subspaces in head_reads.items():
            io.reads[(head_node(layer), port)] = subspaces
        reads, writes = mlp_reads_writes(block, layout, atol)
        io.writes[mlp_node(layer)] = writes
        io.reads[(mlp_node(layer), MLP_PORT)] = reads
    io.reads[(OUTPUT, OUT_PORT)] = readout_subspaces(W_U, layout)
    data = set(data).union(*(w for node, w in io.writes.items() if node != INPUT))
    graph = CircuitGraph(len(blocks), [], io, data, name)
    for dst, port in graph.destinations():
        for src in graph.sources:
            if _order(src) >= _order(dst):
                continue
            carried = io.writes[src] & io.reads[(dst, port)] & data
            graph.edges.append(Edge(src, dst, port, tuple(s for s in layout.names if s in carried)))
    return graph


def encoder_subspaces(encode, layout: ResidualLayout, n: int = 4, seed: int = 0) -> tuple[set[str], set[str]]:
    """:func:`input_subspaces` for a circuit with its own encoder (``encode(X, C0)`` -> ``(resid, ...)``, the swap
    circuits'), on two random problems."""
    rng = np.random.default_rng(seed)
    runs = [np.asarray(encode(rng.normal(size=(n, layout.d)), rng.normal(size=(layout.k, layout.d)))[0][0])
            for _ in range(2)]
    written = {s for s in layout.names if any(np.abs(r[:, layout[s]]).max() > 0 for r in runs)}
    data = {s for s in layout.names if not np.array_equal(runs[0][:, layout[s]], runs[1][:, layout[s]])}
    return written, data


def circuit_graph(circuit, atol: float = 0.0) -> CircuitGraph:
    """The graph of a built circuit, from its construction weights: a :class:`~circuits.build.KMeansCircuit`
    (Lloyd's and the variants), or a swap circuit (:class:`circuits.swap.build.SwapCircuit`, the learned swap),
    whose layers are its step's blocks repeated (``stacked_blocks``) and whose input comes from its own encoder."""
    from circuits.blocks import unembed_matrix

    W_U = getattr(circuit, "W_U", None)
    W_U = unembed_matrix(circuit.layout) if W_U is None else np.asarray(W_U)
    if not circuit.blocks:
        raise ValueError("the circuit keeps no construction blocks to derive a graph from")
    if hasattr(circuit, "stacked_blocks"):
        return graph_from_blocks(circuit.stacked_blocks(), circuit.layout, W_U, atol, type(circuit).__name__,
                                 encoder_subspaces(circuit.encode, circuit.layout))
    return graph_from_blocks(list(circuit.blocks), circuit.layout, W_U, atol, getattr(circuit, "variant", ""))
