"""Supervised fine-tuning of language and vision-language models (tasks ``llm-sft`` and ``vlm-sft``).

Built on the public Trainer SDK only. Run it inside Forge, or by hand::

    INPUT_URI=./chats OUTPUT_DIR=./out CONFIG_JSON='{"task": "llm-sft", "base_model": "my-qwen",
      "base_model_spec": {"name": "my-qwen", "family": "qwen2",
                          "source": {"kind": "local", "uri": "/models/Qwen2.5-0.5B-Instruct"}},
      "hyperparameters": {"method": "lora", "epochs": 3}}' python -m forge_trainers.sft

(the pool's from-config seeds work the same way: ``"source": {"kind": "config", "config":
{"model_type": "qwen2", "hidden_size": 64, …}, "tokenizer": {"train": {"vocab_size": 1024}}}``).

Base models come from the job's ``base_model_spec``: a Hugging Face-format checkpoint in a local
folder or under an object-storage prefix (``AutoModelForCausalLM``; VLMs — Qwen2-VL,
SmolVLM/Idefics3, LLaVA — through ``AutoModelForImageTextToText`` and their processors), a hub id,
or a configuration (random initialisation, with a byte-level BPE tokenizer trained on the training
split and, for LLaVA, an image processor built offline). Methods: ``full``, ``lora`` and ``qlora``
(a 4-bit nf4/fp4 base through bitsandbytes; on CPU it needs bitsandbytes ≥ 0.49). The loss is on
assistant tokens only; see :mod:`.chat` for how they are found and :mod:`.modeling` for the
default LoRA targets.

**Which unit governs Stop versus Cancel.** The *completed unit*, reported with
``run.epoch_completed(unit, …)``. By default a unit is an epoch. With ``save_steps`` set, a unit is
a checkpoint interval of ``save_steps`` optimizer steps — for long single-epoch runs — counted from
the start of training across epoch boundaries (the last may be shorter); the SDK's ``total_epochs``
is then the number of units, each unit's metrics carry the fractional ``epoch`` reached, and the
log says so at the start. Every completed unit evaluates (main metric ``eval_loss`` on the val
split, lower is better; also ``perplexity`` and ``train_loss``), keeps ``checkpoints/best.tar``
when it improved and rewrites ``checkpoints/last.tar``. ``eval_steps`` adds evaluations between
units as step metrics; they never choose the best model (only units have checkpoints).

Stop (SIGTERM → ``run.should_stop()``) is checked after every optimizer step. With at least one
completed unit the run saves ``last`` at that step, exports the best unit's weights and ends
*stopped*; before the first completed unit it leaves at once and the SDK ends it *canceled*,
deleting the outputs. A resume (``RESUME_FROM``) restores the weights or adapter, optimizer,
scheduler, scaler, RNG and the step, so the data order continues exactly; the history is trimmed
to the completed units and the steps of a partial unit saved at a stop are reported again, so
``history.jsonl`` holds every step once.

Outputs: ``adapter/`` or ``model/`` (with tokenizer/processor), ``merged/`` (``merge: true``),
``base-model/`` (from-config base under an adapter), ``split.json``, ``history.jsonl``,
``metrics.json`` and the registration descriptor; out-of-memory fails as ``out_of_memory`` with a
hint that fits the settings (smaller batch with more accumulation, gradient checkpointing, qlora).
"""

from .trainer import main, train

__all__ = ["main", "train"]
