"""What every engine shares: the model states a rank holds, and the hooks the timeline walk calls at
each point of the step. An engine overrides the hooks where it allocates, gathers, reduces or frees
something of its own; the defaults are a plain single-process step."""

from __future__ import annotations

from dataclasses import dataclass

from trainmem.memory.plan import StepPlan
from trainmem.memory.states import RankParams, qlora_base_bytes
from trainmem.memory.timeline import Timeline
from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup

__all__ = ["ModelStates", "Engine", "lora_base", "local_experts", "zero_shard_elems"]


@dataclass
class ModelStates:
    """Bytes of what a rank holds between steps, and the element sizes its step works with."""

    params: int = 0
    master: int = 0
    grads_static: int = 0
    states: int = 0
    comm_static: int = 0
    host: int = 0
    grad_elem: int = 4          # bytes of a (local) gradient element
    step_grad_fp32: int = 0     # fp32 gradient copy built at step() (DeepSpeed/FP16_Optimizer)
    step_temp: int = 0
    unsharded_elem: int = 0     # fsdp2/zero-3: bytes of a gathered parameter element
    paged: int = 0              # optimizer state in CUDA managed memory (bitsandbytes paged optimizers)
    pre_unshard_max: int = 0    # FSDP1: the largest block set on the pre-unshard stream (its own pool)
    pre_unshard_at_peak: tuple[int, int] = (0, 0)  # FSDP1: (timeline peak, pre-unshard bytes live at it)


def lora_base(spec: ModelSpec, s: TrainingSetup, rp: RankParams, notes: list[str]) -> tuple[int, int]:
    """(bytes of one trainable element, bytes of the frozen base) for this rank. PEFT keeps adapters in
    fp32 (autocast_adapter_dtype=True), ``adapter_dtype`` bf16 in the base's dtype; the frozen base is 16-bit (NF4 for the quantised matmul weights
    with --qlora). Full fine-tuning: (the recipe's parameter bytes, 0)."""
    from trainmem.memory.states import param_bytes_per_elem

    if not s.is_lora:  # (a VLM's frozen vision tower is stored as the rest: memory/vision.py)
        return param_bytes_per_elem(s), (rp.total - rp.trainable) * param_bytes_per_elem(s)
    frozen = rp.total - rp.trainable
    if s.qlora:
        base = qlora_base_bytes(rp.frozen_quantized) + 2 * (frozen - rp.frozen_quantized)
        notes.append("QLoRA: NF4 base weights, block 64, double quantisation (≈0.516 B/weight); "
                     "embeddings, norms and LM head 16-bit")
        notes.append("QLoRA: each NF4 weight is dequantised to a 16-bit temporary for its matmul")
    elif s.load_in_8bit:  # LLM.int8 (memory/int8.py)
        from trainmem.memory.int8 import INT8_NOTE, int8_base_bytes
        base = int8_base_bytes(spec, rp.frozen_quantized) + 2 * (frozen - rp.frozen_quantized)
        notes.append(INT8_NOTE)
    else:
        base = frozen * (4 if s.precision == "fp32" else 2)
    if s.kbit_prep not in (None, "none"):  # --kbit-prep: frozen 16-bit weights cast to fp32 (memory/kbit_prep.py)
        from trainmem.memory.kbit_prep import KBIT_PREP_NOTES, kbit_prep_fp32_extra_bytes, kbit_prep_upcast_params
        base += kbit_prep_fp32_extra_bytes(kbit_prep_upcast_params(spec, s, rp))
        notes.append(KBIT_PREP_NOTES[s.kbit_prep])
    if s.adapter_dtype == "bf16":
        notes.append("LoRA: adapters bf16 (the base's dtype: torchtune, PEFT autocast_adapter_dtype=False; "
                     "no fp32 copy), gradients and optimizer states in it; base frozen")
        return 2, base
    notes.append("LoRA: adapters fp32 (PEFT default), base frozen; only adapters have gradients and optimizer state")
    notes.append("LoRA (PEFT, lora_dropout 0, bias none): the frozen base is 16-bit (amp recipes: autocast over "
                 "it); frozen linears keep no input, frozen norms no normalised copy; each adapter keeps its "
                 "(cast) input and rank activation; gradient checkpointing with enable_input_require_grads, "
                 "else nothing is saved before layer 0's first adapter")
    return 4, base


def local_experts(spec: ModelSpec, s: TrainingSetup, rp: RankParams) -> int:
    """Routed-expert parameters held by this rank (its pipeline stage, ÷ ep, ÷ tp); 0 for LoRA."""
    from trainmem.memory.states import layers_of_stage

    if s.is_lora or not spec.is_moe:
        return 0
    return sum(spec.params.layers[i].experts // s.ep // s.tp for i in layers_of_stage(spec, s, rp.stage))


def zero_shard_elems(n: int, experts: int, shard: int, ep: int) -> int:
    """Elements of ``n`` local parameters (``experts`` of them routed experts) that one rank owns when
    dense parameters are partitioned over ``shard`` ranks and experts over the expert-data-parallel
    group of ``shard / ep`` ranks (no sharding when ``shard`` is 1)."""
    if shard <= 1:
        return n
    return (n - experts) // shard + experts // max(1, shard // ep)


class Engine:
    """A plain single-process step; subclasses add their engine's buffers and collectives."""

    #: Does the boundary micro-batch (the one before ``step()``) allocate differently from the others?
    boundary_differs = False
    #: Does autocast save 16-bit copies of fp32 weights (no param_dtype gather)?
    amp_weight_copies = True

    def __init__(self, spec: ModelSpec, s: TrainingSetup, rp: RankParams, notes: list[str]) -> None:
        self.spec, self.s, self.rp = spec, s, rp
        self.st = self.model_states(notes)
        self.tl: Timeline = Timeline()
        self.plan: StepPlan | None = None

    def model_states(self, notes: list[str]) -> ModelStates:  # pragma: no cover - abstract
        raise NotImplementedError

    def bind(self, tl: Timeline, plan: StepPlan) -> None:
        self.tl, self.plan = tl, plan
        # optimizer in backward, tied LM head: the head's gradient of the shared weight waits in autograd's
        # input buffer of its AccumulateGrad until the embedding's backward adds its part; the hook fires then
        self._awaiting = {"g_emb"} if (self.s.optimizer_in_backward and self.spec.tie_word_embeddings) else set()

    # -- static state ------------------------------------------------------------------------------
    def alloc_static(self) -> None:
        tl, st = self.tl, self.st
        tl.alloc("params", "parameters", st.params)
        tl.alloc("master", "master_weights", st.master)
        tl.alloc("states", "optimizer_states", st.states)
        tl.alloc("grad_buffer", "gradients", st.grads_static)
        tl.alloc("ddp_buckets", "communication_buffers", st.comm_static)

    # -- forward -----------------------------------------------------------------------------------
    def forward_start(self, mb: int) -> None:
        """Before the first layer's forward (every pipeline stage)."""

    def layer_forward_start(self, j: int) -> None:
        """Before layer j's forward (gather its parameters)."""

    def layer_forward_end(self, j: int) -> None:
        """After layer j's forward (release gathered parameters)."""

    def bulk_forward_start(self, js: list[int]) -> None:
        """Before the forward of a block of identical layers."""

    # -- backward ----------------------------------------------------------------------------------
    def backward_start(self, mb: int) -> None:
        """Before the loss backward."""

    def after_gradient_stream(self, mb: int, boundary: bool) -> None:
        """Once the gradient of the last hidden state exists, before the layers' backward."""

    def layer_backward_start(self, j: int) -> None:
        """Before layer j's backward (gather, prefetch the layer below)."""

    def grad(self, key: str, n: int, mb: int) -> None:
        """Gradients of ``n`` trainable parameters produced in the backward of micro-batch ``mb``:
        AccumulateGrad steals the first gradient; later ones are added in place."""
        if n <= 0:
            return
        tl = self.tl
        if not tl.has(key):
            tl.alloc(key, "gradients", self.st.grad_elem * n)
        else:
            tl.spike(key + ":new", "temporaries", self.st.grad_elem * n)
        if self.s.optimizer_in_backward:
            if key in self._awaiting:
                self._awaiting.discard(key)
                return
            self.step_in_backward(key)

    def step_in_backward(self, key: str) -> None:
        """Optimizer in backward: the post-accumulate-grad hook steps the parameter (one tensor's foreach
        temporaries, :func:`optimizer_step_temp_bytes` of its elements) and ``zero_grad`` frees its gradient."""
        from trainmem.memory.states import optimizer_step_temp_bytes

        tl, elem = self.tl, self.st.grad_elem
        n = tl.live[key][1] // elem
        tl.spike(key + ":step", "temporaries", optimizer_step_temp_bytes(self.s, n, elem, elem))
        tl.free(key)

    def layer_backward_end(self, j: int) -> None:
        """After layer j's backward (reduce its gradients, release its parameters)."""

    def bulk_grads(self, j0: int, n: int) -> None:
        """The gradients a block of ``n`` identical layers (first j0) leaves behind."""
        from trainmem.units import round_up_bytes as _r

        key = f"gbulk{j0}"
        if not self.tl.has(key):
            elem = self.st.grad_elem
            self.tl.alloc(key, "gradients", sum(_r(elem * x) for x in self.plan.grad_pieces(j0) if x > 0) * n)

    def bulk_backward_end(self, js: list[int]) -> None:
        """After the backward of a block of identical layers."""

    def backward_end(self, mb: int) -> None:
        """After the embedding's backward."""

    # -- optimizer ---------------------------------------------------------------------------------
    def before_step(self) -> None:
        """After the last micro-batch, before ``optimizer.step()``."""

    def step(self) -> None:
        """``optimizer.step()``: its temporaries."""
        self.tl.spike("opt_tmp", "temporaries", self.st.step_temp, aggregate=True)  # foreach: per-parameter temporaries

    def zero_grad(self) -> None:
        """``zero_grad(set_to_none=True)``: the gradients go."""
        tl = self.tl
        for k in [k for k in list(tl.live) if k.startswith("g") and tl.live[k][0] == "gradients"
                  and self._freed_at_zero_grad(k)]:
            tl.free(k)

    def _freed_at_zero_grad(self, key: str) -> bool:
        return key != "grad_buffer"
