"""Build the safeguarded-swap circuit as a ``HookedTransformer`` and run it on a problem, in the user's units.

``build_swap_circuit(d, k, steps)`` builds the step's blocks (:mod:`circuits.swap.stages`, the same weights in
every step) with the Lloyd circuit's config (one head per block, gated ReLU MLP, no normalisation, bidirectional
attention, every parameter checked finite): ``step_model``, the 14 blocks of one step as plain torch modules
(:mod:`circuits.plain`, no TransformerLens), and ``model``, ``steps`` copies of them stacked in a
``HookedTransformer`` (:func:`circuits.build.build_model`, loaded strictly; built on first use). :meth:`SwapCircuit.run`
encodes a problem with the Lloyd circuit's unit scaling (:func:`circuits.encoding.fit_unit_scaling`, centred on the
median, :data:`CENTRE`), runs the circuit once and reads, from the residual stream, the centroids after each step,
the candidate each step kept and the objective of every iterate (the circuit's own averages over points, scaled
back to the user's units).

Two execution paths compute the same residual stream. ``dense``: ``model.run_with_cache``, the stacked
``HookedTransformer`` with its ``(tokens)^2`` attention patterns. ``structured``: the step model ``steps`` times
in a row through :func:`circuits.structured.structured_forward` (grouped attention on identical queries or keys,
found and verified on the run's own vectors; restricted linear maps), which never forms a pattern over points x
points. Since every step has the same weights, running the step model ``steps`` times *is* running the stacked
model, block for block; the tests hold the two paths' residual streams together at every layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np
import torch
from jaxtyping import Float

from circuits import hook_names
from circuits.build import CircuitWeights, build_model, changed_parameters, parameter_digests
from circuits.devices import torch_threads
from circuits.encoding import as_batch, fit_unit_scaling, read
from circuits.layout import ResidualLayout
from circuits.plain import PlainTransformer
from circuits.sharpness import Sharpness
from circuits.swap.knobs import SwapKnobs
from circuits.swap.layout import SWAP_GROUPS, StepGroups, SwapSequence, swap_layout
from circuits.swap.reference import SwapTrajectory
from circuits.swap.stages import STEP_BLOCKS, step_blocks
from circuits.weights import dense

if TYPE_CHECKING:
    from circuits.model import CircuitTransformer

#: Where a problem is centred before scaling into the unit ball: the coordinate-wise median keeps the bulk of the
#: data near 0 when a few points are far away, which is what float64 resolves best (:mod:`circuits.sharpness`);
#: the algorithm is translation-invariant.
CENTRE = "median"


@dataclass(frozen=True)
class Alterations:
    """What of a run was not the construction as built (:meth:`SwapCircuit.alterations`): the stacked model's
    parameters whose bits differed from the weights as built (``edited``: by state-dict name, the digest of the bits
    that ran, :func:`circuits.build.parameter_digests`) and its modules that carried forward hooks (``hooks``). Empty
    (false): the construction ran as built."""

    edited: dict[str, bytes] = field(default_factory=dict)
    hooks: tuple[str, ...] = ()

    @property
    def weight_edits(self) -> list[str]:
        return list(self.edited)

    def __bool__(self) -> bool:
        return bool(self.edited or self.hooks)


@dataclass
class SwapRun(SwapTrajectory):
    """One problem run through the circuit: the trajectory (``centroids[t]`` after ``t`` steps, ``[0]`` is ``C0``,
    in user units; Lloyd's chain as the circuit's ``lloyd`` group holds it), every number read from the residual
    stream, plus every candidate's objective at each step ``[steps, 3]`` (tie order: lloyd, swap, reference)."""

    candidate_objectives: Float[np.ndarray, "steps candidates"]
    #: The execution path that ran it (``"structured"`` or ``"dense"``) and, when ``auto`` fell back, why.
    path: str = "dense"
    path_note: str = ""
    #: What of the circuit that ran was not the construction as built (edited weights, added hooks).
    alterations: Alterations = field(default_factory=Alterations)


#: The execution paths of :meth:`SwapCircuit.run`: ``auto`` is structured, dense where the structured path refuses.
PATHS = ("auto", "structured", "dense")
#: The blocks whose residual stream the run reads: the start's objective, the choice, the kept centroids.
READ_BLOCKS = ("removal", "choose", "select")


@dataclass
class SwapCircuit:
    #: The names of one step's blocks and the step's groups and candidates (a subclass with more candidates,
    #: :class:`circuits.learned.build.LearnedCircuit`, sets its own).
    STEP: ClassVar[tuple[str, ...]] = STEP_BLOCKS
    SPEC: ClassVar[StepGroups] = SWAP_GROUPS

    #: The 14 blocks of one step as plain torch modules (:class:`circuits.plain.PlainTransformer`).
    step_model: PlainTransformer
    layout: ResidualLayout
    knobs: SwapKnobs
    steps: int
    schedule: list[str] = field(default_factory=list)
    #: The step's blocks and the unembedding, from which :attr:`model` is stacked.
    blocks: list = field(default_factory=list, repr=False)
    W_U: np.ndarray | None = field(default=None, repr=False)
    _model: CircuitTransformer | None = field(default=None, repr=False)
    #: The stacked model's parameters as built (digests by name), taken as it is built: what an edit is told by.
    _built: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def model(self) -> CircuitTransformer:
        """The whole circuit, ``steps`` copies of the step's blocks in one ``HookedTransformer``, built on first use.
        Until then the structured path runs :attr:`step_model` once per step; once it exists, the structured path
        runs it, so that an edit of its weights counts on every path."""
        if self._model is None:
            self._model = build_model(self.stacked_blocks(), self.W_U, self.layout,
                                      dtype=self.step_model.cfg.dtype, device=self.step_model.cfg.device)
            self._built = parameter_digests(dict(self._model.named_parameters()))
        return self._model

    def alterations(self) -> Alterations:
        """What a run now would run that is not the construction as built: the stacked model's parameters whose bits
        differ from the weights as built, however they were changed (through ``.data`` too:
        :mod:`circuits.fingerprint`), and its modules carrying forward hooks (the construction has none of its own).
        The stacked model is what a caller edits or hooks; before it exists the step models run, which are the
        weights as built."""
        if self._model is None:
            return Alterations()
        from circuits.structured import forward_hook_counts

        edited = changed_parameters(self._built, dict(self._model.named_parameters()))
        return Alterations(edited, tuple(name for name, n in forward_hook_counts(self._model).items() if n))

    def stacked_blocks(self) -> list:
        """Every layer's block, step after step (the same weights in every step)."""
        return self.blocks * self.steps

    def step_model_at(self, step: int) -> PlainTransformer:
        """The plain model of step ``step`` (0-based): :attr:`step_model`, the same for every step."""
        return self.step_model

    @property
    def n_layers(self) -> int:
        return self.steps * len(self.STEP)

    def layer(self, step: int, block: str) -> int:
        """The layer of ``block`` (a name of :data:`STEP_BLOCKS`) in step ``step`` (0-based)."""
        if not 0 <= step < self.steps:
            raise IndexError(f"step {step} out of range for {self.steps} steps")
        return step * len(self.STEP) + self.STEP.index(block)

    def user_tie_break(self, X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"]) -> float:
        """The circuit's tie-break for this problem in squared user units (the reference's ``tie_break``)."""
        return self.knobs.sharpness.tie_break * float(fit_unit_scaling(X, C0, CENTRE).scale[0]) ** 2

    def encode(self, X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"]):
        """Residual input ``(1, pos, d_model)``, the token layout and the unit scaling."""
        X, C0 = as_batch(X, "X"), as_batch(C0, "C0")
        if X.shape[0] != 1 or C0.shape[0] != 1:
            raise ValueError("run takes one problem: X (n, d) and C0 (k, d)")
        lay = self.layout
        if X.shape[2] != lay.d or C0.shape[1:] != (lay.k, lay.d):
            raise ValueError(f"circuit is for d={lay.d}, k={lay.k}; got X {X.shape[1:]} and C0 {C0.shape[1:]}")
        if not (np.isfinite(X).all() and np.isfinite(C0).all()):
            raise ValueError("X and C0 must be finite")
        n = X.shape[1]
        if n < 1:
            raise ValueError("X has no points")
        seq = SwapSequence(n, lay.k, tuple(name for name, _, _ in self.SPEC.groups))
        scaling = fit_unit_scaling(X, C0, CENTRE)
        ux, uc = scaling.to_unit(X)[0], scaling.to_unit(C0)[0]
        resid = np.zeros((1, seq.n_tokens, lay.d_model))
        resid[0, :, lay["ONE"]] = 1.0
        resid[0, seq.bos, lay["IS_BOS"]] = 1.0
        resid[0, seq.points, lay["IS_POINT"]] = 1.0
        resid[0, seq.points, lay["X"]] = ux
        resid[0, seq.points, lay["PIDX"]] = (np.arange(n) / n)[:, None]
        for name, ident, flag in self.SPEC.groups:
            pos = seq.group(name)
            resid[0, pos, lay["IS_CENTROID"]] = 1.0
            resid[0, pos, lay[ident]] = np.eye(lay.k)
            resid[0, pos, lay[flag]] = 1.0
            if name != "proposal":  # the proposal group is written by each step before it is read
                resid[0, pos, lay["C"]] = uc
                resid[0, pos, lay["N"]] = (uc**2).sum(axis=1)[:, None]
        cfg = self.step_model.cfg
        return torch.as_tensor(resid, dtype=cfg.dtype, device=cfg.device), seq, scaling

    def residuals(self, resid: Float[torch.Tensor, "1 pos d_model"], path: Literal["structured", "dense"],
                  blocks: tuple[str, ...] = READ_BLOCKS) -> dict[tuple[int, str], Float[torch.Tensor, "1 pos d_model"]]:
        """The residual stream after each of ``blocks`` (names of :data:`STEP_BLOCKS`) of every step, by
        ``(step, block)``, on ``path``; the structured path raises
        :class:`~circuits.structured.StructuredPathUnavailable` when it cannot run the problem exactly (it says
        why)."""
        if path == "dense":
            names = {hook_names.resid_post(self.layer(t, b)): (t, b) for t in range(self.steps) for b in blocks}
            with torch.no_grad():
                _, cache = self.model.run_with_cache(resid, names_filter=lambda name: name in names)
            return {key: cache[name] for name, key in names.items()}
        # The structured path's products are small (d_model x tokens): torch's intra-op threads only wait on each
        # other, and on a busy machine ruinously (400 points, 20 steps, 2 shared cores under load: 0.45 s of CPU
        # with one thread, 12.7 s with two).
        with torch_threads(1):
            return self._structured_residuals(resid, blocks)

    def _structured_residuals(self, resid: Float[torch.Tensor, "1 pos d_model"], blocks: tuple[str, ...]
                              ) -> dict[tuple[int, str], Float[torch.Tensor, "1 pos d_model"]]:
        from circuits.structured import Recording, structured_forward

        out: dict[tuple[int, str], torch.Tensor] = {}
        names = self.STEP
        if self._model is not None:
            # The stacked model exists: it is what a caller edits or hooks, so it is what runs (the step models are the
            # weights as built). One forward over every layer; a hook it cannot see through refuses the path.
            def take_any(layer: int, record) -> None:
                t, i = divmod(layer, len(names))
                if names[i] in blocks:
                    out[(t, names[i])] = record.resid_post.clone()

            structured_forward(self._model, resid, recording=Recording(take_any, pre=False))
            return out
        end = names[-1]
        for t in range(self.steps):
            step: dict[str, torch.Tensor] = {}

            def take(layer: int, record, step: dict = step) -> None:
                if names[layer] in blocks or names[layer] == end:
                    step[names[layer]] = record.resid_post.clone()

            # In place (pre=False): the stream is updated block by block and each block read is copied as it ends;
            # the step's last block's stream enters the next step.
            structured_forward(self.step_model_at(t), resid, recording=Recording(take, pre=False))
            out.update({(t, block): step[block] for block in blocks})
            resid = step[end]
        return out

    def run(self, X: Float[np.ndarray, "n d"], C0: Float[np.ndarray, "k d"], path: str = "auto") -> SwapRun:
        """The circuit on one problem, on ``path`` (:data:`PATHS`); ``candidate_objectives`` has a column per candidate
        of :attr:`SPEC`."""
        if path not in PATHS:
            raise ValueError(f"path must be one of {PATHS}, got {path!r}")
        resid, seq, scaling = self.encode(X, C0)
        altered = self.alterations()
        used, note = ("dense", "") if path == "dense" else ("structured", "")
        if used == "structured":
            from circuits.structured import StructuredPathUnavailable

            try:
                cache = self.residuals(resid, "structured")
            except StructuredPathUnavailable as exc:
                if path == "structured":
                    raise
                used, note = "dense", f"structured path unavailable: {exc}"
        if used == "dense":
            cache = self.residuals(resid, "dense")
        n, s2 = seq.n, float(scaling.scale[0]) ** 2
        at = lambda t, b: cache[t, b]  # noqa: E731
        centroids, lloyd = [as_batch(C0, "C0")[0]], [as_batch(C0, "C0")[0]]
        choices, objectives, candidates = [], [], []
        for t in range(self.steps):
            objectives.append(n * s2 * read(self.layout, at(t, "removal"), "OBJ0", seq.bos)[0, 0])
            chosen = at(t, "choose")
            onehot = read(self.layout, chosen, "CHOICE", seq.bos)[0]
            if not np.array_equal(np.sort(onehot), np.eye(len(onehot))[-1]):
                raise RuntimeError(f"step {t + 1}: the choice is not one-hot ({onehot}); a knob is outside its range")
            choices.append(self.SPEC.candidates[int(onehot.argmax())][0])
            candidates.append(n * s2 * read(self.layout, chosen, "OBJ", seq.bos)[0])
            final = at(t, "select")
            centroids.append(scaling.from_unit(read(self.layout, final, "C", seq.group("current")))[0])
            lloyd.append(scaling.from_unit(read(self.layout, final, "C", seq.group("lloyd")))[0])
        candidates = np.array(candidates).reshape(self.steps, len(self.SPEC.candidates))
        chosen_obj = candidates[np.arange(self.steps), [self.SPEC.slot(c) for c in choices]]
        # Lloyd's chain's objectives are the circuit's "reference" candidate's (step 0: the start, shared by all).
        return SwapRun(np.stack(centroids), choices, np.array([*objectives[:1], *chosen_obj]), np.stack(lloyd),
                       np.array([*objectives[:1], *candidates[:, self.SPEC.slot("reference")]]), candidates,
                       used, note, altered)


def build_swap_circuit(d: int, k: int, steps: int, *, beta: float = 1e14, tie_break: float = 1e-11,
                       mask: float = 16.0, beta_update: float = 4000.0, beta_select: float = 1e200,
                       select_margin: float = 1e-10, dtype: torch.dtype = torch.float64,
                       device: str = "cpu") -> SwapCircuit:
    """The safeguarded-swap circuit for ``d``-dimensional points, ``k >= 2`` centroids and ``steps >= 1`` steps.

    Knobs and their safe ranges: :mod:`circuits.swap.knobs` (a ``ValueError`` outside them). float64 only: the
    choice head's scores reach ``16 * beta_select``.
    """
    if d < 1 or k < 2 or steps < 1:
        raise ValueError(f"the swap circuit needs d >= 1, k >= 2 and steps >= 1, got d={d}, k={k}, steps={steps}")
    if dtype != torch.float64:
        raise ValueError(f"the swap circuit is exact only in float64, got {dtype}")
    knobs = SwapKnobs(Sharpness(beta=beta, beta_update=beta_update, mask=mask, tie_break=tie_break),
                      beta_select=beta_select, select_margin=select_margin)
    layout = swap_layout(d, k)
    blocks = step_blocks(layout, knobs)
    # W_U reads CHOICE: the logits at any token are the kept candidate (lloyd, swap, reference).
    W_U = np.stack([dense(layout, {("CHOICE", r): 1.0}) for r in range(3)], axis=1)
    # The step model runs on the structured path only: plain torch modules of the step's state dict, so a swap run
    # imports no TransformerLens (seconds) unless the dense path asks for the stacked model.
    step_model = CircuitWeights.from_blocks(blocks, W_U, layout, dtype=dtype, device=device).plain()
    return SwapCircuit(step_model, layout, knobs, steps, [b.kind for b in blocks] * steps, blocks, W_U)
