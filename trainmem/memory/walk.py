"""The shared timeline walk of one steady optimizer step on one rank: every micro-batch's forward layer
by layer, the loss, the backward layer by layer (MLP first, then attention, then the input norm, with
the recomputation of checkpointed layers), the optimizer step and ``zero_grad``. What is engine-specific
— gathering, reducing, gradient buffers, the optimizer's copies — is asked of the engine
(:mod:`trainmem.memory.engines`); what a layer saves and makes comes from the plan
(:mod:`trainmem.memory.plan`)."""

from __future__ import annotations

from trainmem.memory.gpt_oss_frames import gpt_oss_recompute_frame_bytes
from trainmem.memory.layers.lora import lora_forward_frame_bytes, lora_head_frame_bytes, lora_recompute_frame_bytes
from trainmem.memory.layers.model_wide import embedding_saved, head_saved, recomputed_checkpoint_input_bytes
from trainmem.memory.act_offload import offloaded_host_bytes, stash_bytes, stash_window_layers
from trainmem.memory.bnb_legacy import previous_graph_bytes
from trainmem.memory.engines import Engine
from trainmem.memory.lora_head import (head_adapter_backward_bytes, head_adapter_forward_bytes,
                                       head_adapter_keeps_input, head_adapter_saved_bytes)
from trainmem.memory.loss import LossBuffers
from trainmem.memory.plan import StepPlan
from trainmem.memory.timeline import Timeline
from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup
from trainmem.units import round_up_bytes as _r

__all__ = ["StepWalk"]


class StepWalk:
    def __init__(self, spec: ModelSpec, s: TrainingSetup, stage: int, plan: StepPlan, engine: Engine,
                 loss: LossBuffers, tl: Timeline) -> None:
        self.spec, self.s, self.plan, self.eng, self.loss, self.tl = spec, s, plan, engine, loss, tl
        self.first, self.last = stage == 0, stage == s.pp - 1
        # each layer's recompute (``recompute_layers``: the stage's first N full, the rest none)
        self.rc = [s.recomputes(j) for j in range(len(plan.layer_ids))]
        # Pipeline: stage i of p keeps min(p - i, m) micro-batches in flight (1F1B); interleaving with
        # v chunks adds (p - 1)/(p·v) on the first stage (Megatron's memory report).
        self.in_flight = min(s.pp - stage, s.grad_accum) if (s.pp > 1 and not s.device_map) else 1
        self.vpp_factor = (s.pp - 1) / (s.pp * s.vpp) if (s.vpp > 1 and stage == 0) else 0.0
        self.offload = s.offload_activations  # (saved tensors to pinned host memory: memory/act_offload.py)
        self.offload_host = 0
        engine.bind(tl, plan)

    # -- the step ----------------------------------------------------------------------------------
    def run(self) -> None:
        tl, eng = self.tl, self.eng
        eng.alloc_static()
        tl.mark("step start")
        if self.s.pp == 1 or self.s.device_map:  # (device_map auto: naive model parallel, memory/device_map.py)
            self._micro_batches()
        else:
            # 1F1B: warm-up forwards fill the pipeline, then the stage holds `in_flight` micro-batches at
            # the first backward; the steady phase alternates one forward / one backward at that level.
            for mb in range(self.in_flight):
                self.forward(mb)
            for mb in range(self.in_flight):
                self.backward(mb, boundary=mb == self.in_flight - 1)
        eng.before_step()
        tl.mark("optimizer step")
        eng.step()
        tl.mark("zero_grad")
        eng.zero_grad()
        tl.mark("step end")

    def _micro_batches(self) -> None:
        """Micro-batches run one after another. Every micro-batch after the second sees exactly the state
        the second saw (gradients exist, nothing else carried over), so the first, the second and the last
        (the boundary, where DeepSpeed reduces) are walked and the rest are repeats of the second."""
        tl, m = self.tl, self.s.grad_accum
        differs = self.eng.boundary_differs
        last_rep = m - 1 if differs else m
        for mb in sorted({0, min(1, m - 1)} | ({m - 1} if differs else set())):
            start = len(tl.points)
            self.forward(mb)
            self.backward(mb, boundary=mb == m - 1)
            if mb == 1 and last_rep > 2:
                tl.finish()  # close the copied segment's last phase (its maximum)
                seg = tl.points[start:]
                cats, maxes = tl.point_categories[start:], tl.phase_max[start:]
                for rep in range(2, last_rep):
                    tl.points.extend((ph.replace("mb1", f"mb{rep}"), v) for ph, v in seg)
                    tl.point_categories.extend(dict(c) for c in cats)
                    tl.phase_max.extend(maxes)

    # -- forward -----------------------------------------------------------------------------------
    def forward(self, mb: int) -> None:
        tl, p = self.tl, self.plan
        tl.mark(f"forward mb{mb}")
        self.eng.forward_start(mb)  # (FSDP2: every stage's root unit — embedding first, norm + LM head last)
        if self.first:  # (a VLM's vision tower + projector run first: memory/vision.py)
            tl.alloc(f"vis{mb}", "activations", p.vision_saved)
            tl.spike(f"visfwd{mb}", "activations", p.vision_fwd_tmp)
            tl.alloc(f"emb{mb}", "activations", embedding_saved(self.spec, self.s))
        tl.alloc(f"wide{mb}", "activations", p.wide)
        if self.first and self.last:  # (--script-keeps-graph: the previous micro-batch's graph, memory/bnb_legacy.py)
            tl.alloc(f"prevgraph{mb}", "activations",
                     previous_graph_bytes(self.spec, self.s, p.layer_ids, p.tokens, self.loss.logits_bytes))
        for j in range(len(p.layer_ids)):
            if j in p.skip:
                continue
            if j in p.bulk_of:
                self.bulk_forward(mb, p.bulk_of[j])
            else:
                self.layer_forward(mb, j)
        if self.vpp_factor:
            tl.alloc(f"vpp{mb}", "activations", int(self.vpp_factor * sum(p.saved_eff)))
        if not self.last and self.s.engine == "fsdp2":
            # torch.distributed.pipelining keeps each stage output for its backward (nothing inside the stage
            # saves the last layer's output); traced: trace/pipeline.py
            tl.alloc(f"stageout{mb}", "activations", p.gstream)
        if self.last:
            self.loss_forward(mb)
        elif self.first and self.s.device_map:
            # the root AlignDevicesHook (io_same_device) sends the output, logits included, back to GPU 0:
            # dropped with the output (trainer loop: before backward; script: after it)
            (tl.spike if self.s.loop == "trainer" else tl.alloc)(f"logits{mb}", "activations", self.loss.logits_bytes)
        if self.offload and mb == 0:
            self.eng.st.host += self.offload_host
        # Checkpointed layers save no weights: their 16-bit copies were held only by autocast's
        # cast cache, which is cleared when the autocast region (forward + loss) ends (offloaded: on the host).
        for j, idx in enumerate(p.layer_ids):
            if self.rc[j] == "full" or self.offload:
                for suffix in ("", ".d", ".m"):
                    tl.free(f"wcopy{mb}.{idx}{suffix}")
        for j0 in p.bulk_of:
            if self.rc[j0] == "full":
                tl.free(f"wcopybulk{mb}.{j0}")

    def layer_forward(self, mb: int, j: int) -> None:
        tl, p, s = self.tl, self.plan, self.s
        idx = p.layer_ids[j]
        self.eng.layer_forward_start(j)
        lora_tmp = lora_forward_frame_bytes(self.spec, s, idx) if s.is_lora else 0  # (in its adapted down_proj)
        rc = self.rc[j]
        full = rc == "full"
        fwd_tmp = p.per_layer(j, p.fwd_tmp)
        tl.spike(f"fwdtmp{mb}.{idx}", "activations", (max(fwd_tmp, lora_tmp) + p.saved[j]) if full else fwd_tmp)
        if self.offload:
            self._offload_forward(mb, j)
        else:
            self._keep(mb, j)
        self._weight_copies(mb, j)
        if lora_tmp and not full:
            tl.spike(f"lorafwd{mb}.{idx}", "activations", lora_tmp)
        self.eng.layer_forward_end(j)

    def _keep(self, mb: int, j: int) -> None:
        """Layer j's saved tensors, kept from its forward to its backward (checkpointed: its input)."""
        tl, p, idx, rc = self.tl, self.plan, self.plan.layer_ids[j], self.rc[j]
        if rc == "full":
            tl.alloc(f"act{mb}.{idx}", "activations", p.saved_eff[j])
            return
        prod, mlp_rest, early, attn = p.kept_parts(j, rc)
        nrm = min(attn, p.norm_part) if rc == "none" else 0
        tl.alloc(f"act{mb}.{idx}.p", "activations", prod)
        tl.alloc(f"act{mb}.{idx}.m", "activations", mlp_rest)
        tl.alloc(f"act{mb}.{idx}.e", "activations", early)
        tl.alloc(f"act{mb}.{idx}", "activations", attn - nrm)
        tl.alloc(f"act{mb}.{idx}.n", "activations", nrm)

    def _weight_copies(self, mb: int, j: int) -> None:
        """Layer j's autocast 16-bit weight copies (the matmuls save them; the cast cache holds them)."""
        c_down, c_mlp, c_attn = self.plan.copy_pieces(j)
        idx = self.plan.layer_ids[j]
        self.tl.alloc(f"wcopy{mb}.{idx}.d", "activations", c_down)
        self.tl.alloc(f"wcopy{mb}.{idx}.m", "activations", c_mlp)
        self.tl.alloc(f"wcopy{mb}.{idx}", "activations", c_attn)

    def _offload_forward(self, mb: int, j: int) -> None:
        """``--offload-activations``: layer j's saved tensors go to pinned host memory; its last ones stay on the
        GPU in the forward stash while their copies are in flight, the layers before the stash's window are
        freed (memory/act_offload.py)."""
        p, s, idx, rc = self.plan, self.s, self.plan.layer_ids[j], self.rc[j]
        kept = p.saved_eff[j] if rc == "full" else sum(p.kept_parts(j, rc))
        if mb == 0:
            self.offload_host += offloaded_host_bytes(rc, kept, p.copies[j])
        window = stash_window_layers(s, rc)
        if j >= window:
            self.tl.free(f"stash{mb}.{p.layer_ids[j - window]}")
        self.tl.alloc(f"stash{mb}.{idx}", "activations", stash_bytes(self.spec, s, idx, rc, kept))

    def bulk_forward(self, mb: int, js: list[int]) -> None:
        """Forward of a block of identical layers: what they leave behind, in one allocation."""
        p, n, j0 = self.plan, len(js), js[0]
        self.eng.bulk_forward_start(js)
        rc = self.rc[j0]  # (a block's layers are alike: saved_eff equal, one recompute)
        per = sum(_r(x) for x in p.kept_parts(j0, rc)) if rc != "full" else _r(p.saved_eff[j0])
        self.tl.alloc(f"actbulk{mb}.{j0}", "activations", per * n)
        self.tl.alloc(f"wcopybulk{mb}.{j0}", "activations", sum(_r(x) for x in p.copy_pieces(j0)) * n)

    def loss_forward(self, mb: int) -> None:
        tl, p, s, loss = self.tl, self.plan, self.s, self.loss
        tl.mark(f"loss mb{mb}")
        tl.free_prefix(f"stash{mb}.")  # (offloaded layers: the final norm's packs push them out of the stash)
        fused = s.loss == "fused-linear"
        tl.alloc(f"head{mb}", "activations", head_saved(self.spec, s.for_target(), lm_input=not fused)
                 + head_adapter_saved_bytes(self.spec, s))  # (LoRA on lm_head: memory/lora_head.py)
        tl.alloc(f"hcopy{mb}", "activations", 0 if fused else p.head_copy)
        if fused:
            self._liger_weight_grads(mb)
        tl.alloc(f"logits{mb}", "activations", loss.logits_bytes)
        tl.spike(f"lorahead{mb}", "activations", head_adapter_forward_bytes(self.spec, s))
        tl.free(f"prevgraph{mb}")  # (the loop rebinds its output now: the old graph goes before the loss)
        tl.alloc(f"losskept{mb}", "activations", loss.kept_bytes)
        frame = 0 if head_adapter_keeps_input(self.spec, s) else lora_head_frame_bytes(self.spec, s)
        tl.spike(f"upcast{mb}", "activations", loss.forward_transient_bytes + frame)
        if loss.output_fp32_copy_bytes:
            # accelerate's convert_outputs_to_fp32 (memory/loss.py): the fp32 copy is made beside the 16-bit
            # logits, which die with the inner output; the copy is the output the loop holds from here
            tl.alloc(f"logits32{mb}", "activations", loss.output_fp32_copy_bytes)
            tl.free(f"logits{mb}")
            tl.rename(f"logits32{mb}", f"logits{mb}")
        if s.loop == "trainer" and not loss.logits_saved:
            # HF Trainer's compute_loss returns the loss only (torchtitan: ``del pred``; Megatron returns
            # the loss): the model output dies here; the loss graph keeps no reference to the logits
            # (``logits.float()`` saves nothing, log_softmax saves its output).
            tl.free(f"logits{mb}")

    def _liger_weight_grads(self, mb: int) -> None:
        """Liger's fused linear cross-entropy computes the LM head's weight gradient in the loss forward
        (``grad_weight = zeros_like(weight)``, trainmem/memory/loss.py ``_fused_linear``). Where no .grad
        exists yet it becomes the .grad (tied: the embedding's; the embedding backward's gradient is added
        into it in place — autograd's InputBuffer accumulates into a plain tensor it alone holds,
        torch/csrc/autograd/input_buffer.cpp ``can_accumulate_inplace``); from the second micro-batch on
        (torch/DDP) it is a buffer alive until AccumulateGrad adds it to the .grad: at the loss backward,
        or, tied, at the embedding backward."""
        p = self.plan
        pieces = [("g_head", p.head_train)]
        if self.spec.tie_word_embeddings and self.first:
            pieces.append(("g_emb", p.emb_train if p.emb_tied is None else p.emb_tied))
        for key, n in pieces:
            if n <= 0:
                continue
            if self.tl.has(key):
                self.tl.alloc(f"ligergw{mb}.{key}", "activations", self.eng.st.grad_elem * n)
                continue
            before = set(self.tl.live)
            self.eng.grad(key, n, mb)
            for k in set(self.tl.live) - before:
                cat, size = self.tl.live[k]
                if cat == "temporaries":  # (FSDP2's unsharded gradient: born in the loss forward, an activation)
                    self.tl.free(k)
                    self.tl.alloc(k, "activations", size)

    # -- backward ----------------------------------------------------------------------------------
    def backward(self, mb: int, boundary: bool) -> None:
        tl, p, eng = self.tl, self.plan, self.eng
        tl.mark(f"backward mb{mb}")
        eng.backward_start(mb)
        if self.last:
            self.loss_backward(mb)
        else:  # the output's gradient, received from the next stage, alive through this backward
            tl.alloc(f"recvgrad{mb}", "temporaries", p.gstream)
        tl.alloc(f"gstream{mb}", "temporaries", p.gstream)
        eng.after_gradient_stream(mb, boundary)
        for j in reversed(range(len(p.layer_ids))):
            if j in p.skip:
                continue
            if j in p.bulk_of:
                self.bulk_backward(mb, p.bulk_of[j])
            else:
                self.layer_backward(mb, j)
        tl.free(f"gstream{mb}")
        self._free_all(f"recvgrad{mb}", f"stageout{mb}")
        tl.free(f"logits{mb}")  # loop "script": ``outputs`` goes out of scope after backward()
        if self.first:
            tl.alloc(f"embfull{mb}", "temporaries", p.emb_backward_transient)  # (torch TP, plan.py)
            if p.emb_tied is None:
                eng.grad("g_emb", p.emb_grad, mb)
            else:  # (OPT, tied: the token embedding's part is added to the head's; positions get their own)
                eng.grad("g_emb", p.emb_tied, mb)
                eng.grad("g_pos", p.emb_grad - p.emb_tied, mb)
            tl.free(f"ligergw{mb}.g_emb")  # (fused linear CE, tied, second micro-batch on: added now)
            tl.free(f"embfull{mb}")
            tl.free(f"emb{mb}")
            eng.grad("g_vis", p.vision_train, mb)  # (a VLM's tower backward runs last)
            tl.free(f"vis{mb}")
        tl.free(f"wide{mb}")
        tl.free(f"vpp{mb}")
        eng.backward_end(mb)

    def loss_backward(self, mb: int) -> None:
        tl, p, loss = self.tl, self.plan, self.loss
        fused = self.s.loss == "fused-linear"
        tl.spike(f"lossbwd{mb}", "temporaries", loss.backward_transient_bytes, aggregate=True,  # gradients alive together
                 pieces=loss.backward_transient_tensors)
        # Fused linear CE keeps the final hidden state's gradient (Liger's grad_input). The final norm's
        # backward peaks with five fp32 b·s·h tensors and the norm's fp32 saved input (traced); the 16-B
        # final_norm_bwd term plus the norm's saved tensors count that exactly for an fp32 residual stream,
        # and 2 B per element short of it for a 16-bit one (whose saved 16-bit normalised copy goes first):
        # there the 16-bit input gradient is let stand for the difference through the spike.
        keep_through_norm = fused and loss.kept_bytes < 4 * p.tokens * self.spec.hidden_size
        if not keep_through_norm:
            tl.free(f"losskept{mb}")
        in_place = loss.grad_in_place  # (unsloth's cross-entropy writes the gradient into the saved logits)
        if in_place and self.s.loop == "trainer":
            tl.free(f"logits{mb}")
        if loss.logits_saved and loss.logits_overlap_bytes and self.s.loop == "trainer":
            # (a compiled chunked loss: each chunk's node frees its saved logits once it made their gradient)
            tl.spike(f"glogitschunk{mb}", "temporaries", loss.logits_overlap_bytes)
            tl.free(f"logits{mb}")
        tl.alloc(f"glogits{mb}", "temporaries", 0 if in_place and self.s.loop != "trainer" else loss.grad_logits_bytes)
        tl.spike(f"loraheadbwd{mb}", "temporaries", head_adapter_backward_bytes(self.spec, self.s))
        if loss.logits_saved and self.s.loop == "trainer":
            tl.free(f"logits{mb}")  # (fused cross-entropy: its saved logits go once its backward has run)
        if not fused:
            self.eng.grad("g_head", p.head_train, mb)
        elif tl.has(f"ligergw{mb}.g_head"):  # Liger's weight gradient of a later micro-batch is added now
            tl.free(f"ligergw{mb}.g_head")
            self.eng.grad("g_head", p.head_train, mb)
        if self.spec.tie_word_embeddings and self.first and not fused:
            # tied LM head: the embedding's gradient is created here, at the head's backward, and the
            # embedding's own backward adds to it at the very end
            self.eng.grad("g_emb", p.emb_train if p.emb_tied is None else p.emb_tied, mb)
        tl.spike(f"headbwd{mb}", "temporaries", loss.head_backward_transient_bytes)
        tl.free(f"glogits{mb}")
        tl.free(f"hcopy{mb}")
        # the final norm's backward, its saved tensors still alive
        tl.spike(f"finalnormbwd{mb}", "temporaries", p.final_norm_bwd)
        tl.free(f"head{mb}")
        tl.free(f"losskept{mb}")

    def layer_backward(self, mb: int, j: int) -> None:
        tl, p, eng, rc = self.tl, self.plan, self.eng, self.rc
        idx, T = p.layer_ids[j], p.per_layer(j, p.tokens)
        eng.layer_backward_start(j)
        if self.offload and rc[j] != "full":  # (its saved tensors and weight copies back from the host)
            self._keep(mb, j)
            self._weight_copies(mb, j)
        if rc[j] != "none" and j == len(p.layer_ids) - 1:
            self.recompute_layer(mb, j)
        n_down, n_mlp_rest, n_o, n_attn_rest = p.grad_pieces(j)
        tl.spike(f"postnormbwd{mb}.{idx}", "temporaries", p.post_norm_bwd)  # (a norm after the MLP: derived post-norm)
        # MLP backward: the output projection's grads, then its saved input and weight copy go (the
        # gradient stream and d(product) first; then d(act), d(up) once down_proj is done)
        tl.alloc(f"bwdtmp{mb}.{idx}", "temporaries", p.compute_bytes * T * p.mlp_width)
        eng.grad(f"g{idx}d", n_down, mb)
        self._free_all(f"act{mb}.{idx}.p", f"rc{mb}.{idx}.p", f"wcopy{mb}.{idx}.d")
        tl.spike(f"bwdtmp{mb}.{idx}.b", "temporaries", p.mlp_bwd_extra * T * p.mlp_width)
        eng.grad(f"g{idx}m", n_mlp_rest, mb)
        self._free_all(f"act{mb}.{idx}.m", f"rc{mb}.{idx}.m", f"wcopy{mb}.{idx}.m", f"bwdtmp{mb}.{idx}")
        # attention (and norms) backward: o_proj's grads first and its input released, then the core's
        # backward (dq, dk, dv; eager: the s² gradients), then the q/k/v projections' grads
        eng.grad(f"g{idx}o", n_o, mb)
        self._free_all(f"act{mb}.{idx}.e", f"rc{mb}.{idx}.e")
        tl.spike(f"bwdtmp{mb}.{idx}", "temporaries", p.per_layer(j, p.attn_transient))
        eng.grad(f"g{idx}", n_attn_rest, mb)
        self._free_all(f"act{mb}.{idx}", f"recomp{mb}.{idx}", f"wcopy{mb}.{idx}")
        # the input norm's backward, its own saved tensors still alive
        tl.spike(f"normbwd{mb}.{idx}", "temporaries", p.per_layer(j, p.norm_bwd))
        tl.free(f"act{mb}.{idx}.n")
        if j > 0 and rc[j - 1] != "none" and (j - 1) not in p.skip and (j - 1) not in p.bulk_of:
            # non-reentrant checkpointing recomputes the layer below once autograd reaches a node of it
            # that unpacks a saved tensor
            self.recompute_layer(mb, j - 1)
        eng.layer_backward_end(j)

    def bulk_backward(self, mb: int, js: list[int]) -> None:
        """Backward of a block: its activations go, its gradients come, collectives' state as after any
        layer of the block."""
        j0 = js[0]
        self._free_all(f"actbulk{mb}.{j0}", f"wcopybulk{mb}.{j0}")
        self.eng.bulk_grads(j0, len(js))
        self.eng.bulk_backward_end(js)
        if j0 > 0 and self.rc[j0 - 1] != "none":
            self.recompute_layer(mb, j0 - 1)

    def recompute_layer(self, mb: int, j: int) -> None:
        """The checkpointed layer's forward runs again: its saved tensors (and, under autocast, its 16-bit
        weight copies) come back before its backward. (selective: only what the policy dropped)"""
        tl, p, s = self.tl, self.plan, self.s
        idx = p.layer_ids[j]
        full = self.rc[j] == "full"
        if full and self.offload:  # the checkpointed input, back from the host
            self._keep(mb, j)
        if full:
            prod, mlp_rest, early, attn = p.parts[j]
        else:
            prod, mlp_rest, early, attn = (a - b for a, b in zip(p.parts[j], p.kept_parts(j, self.rc[j])))
        tl.alloc(f"rc{mb}.{idx}.p", "activations", prod)
        tl.alloc(f"rc{mb}.{idx}.m", "activations", mlp_rest)
        tl.alloc(f"rc{mb}.{idx}.e", "activations", early)
        if full:
            # what the recomputed layer saves that is the checkpointed input itself, already held (act{mb}.{idx}):
            # not twice (gpt_oss with an fp32 stream, nemotron, opt; traced, activations.py)
            attn -= recomputed_checkpoint_input_bytes(self.spec, s)
        tl.alloc(f"recomp{mb}.{idx}", "activations", attn)
        if s.is_lora and full:  # the recomputed forward's frames at its early stop
            tl.spike(f"rcframe{mb}.{idx}", "activations", lora_recompute_frame_bytes(self.spec, s, idx))
        if full:
            c_down, c_mlp, c_attn = p.copy_pieces(j)
            tl.alloc(f"wcopy{mb}.{idx}.d", "activations", c_down)
            tl.alloc(f"wcopy{mb}.{idx}.m", "activations", c_mlp)
            tl.alloc(f"wcopy{mb}.{idx}", "activations", c_attn)
            # gpt_oss: the recomputation's own peak beyond the tensors it recomputes (0 for other families)
            tl.spike(f"rcgpt{mb}.{idx}", "activations", gpt_oss_recompute_frame_bytes(self.spec, s, idx))

    def _free_all(self, *keys: str) -> None:
        for k in keys:
            self.tl.free(k)
