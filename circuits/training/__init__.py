"""Training the k-means transformer: tasks, a recurrent trainable model with tied weights, loss, loop, checkpoints.

The trainable model is the exact circuit's architecture (one update block and one assign block of a
``HookedTransformer``, in the named residual layout of :mod:`circuits.layout`) applied recurrently with tied
weights. It can start from the construction with a finite, trainable sharpness, or from random weights; trained
weights export back to a real ``HookedTransformer`` so the analyses read them in the named basis.

Modules: :mod:`~circuits.training.tasks` (random clustering tasks),
:mod:`~circuits.training.general_tasks` (tasks of any shape and kind, for a general model), :mod:`~circuits.training.construction`
(the trainable layout and its initial weights), :mod:`~circuits.training.model` (the recurrent model, its fast
forward pass and its ``HookedTransformer`` export), :mod:`~circuits.training.loss`,
:mod:`~circuits.training.loop` (Adam, validation, resumable checkpoints) and
:mod:`~circuits.training.checkpoint` (safetensors + JSON; loading never unpickles).
"""
