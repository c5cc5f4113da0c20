"""A random, tiny causal LM (Qwen2-style by default, or of another family) with a character-level tokenizer,
built offline in a blink.

``make_tiny_model(out_dir)`` writes a directory that ``AutoModelForCausalLM.from_pretrained`` and
``AutoTokenizer.from_pretrained`` load like any Hub checkpoint:

- ``config.json``, ``generation_config.json``, ``model.safetensors``: a ``Qwen2ForCausalLM`` (float32, tied
  input/output embeddings) whose weights are drawn from a ``torch.Generator`` seeded with ``seed``, so the
  same arguments give a byte-identical ``model.safetensors`` (with one torch/transformers/safetensors
  install) and the caller's global RNG state is left untouched. Linear and embedding weights are
  ``N(0, 0.02)``, biases zero, RMSNorm weights one (the transformers defaults, but drawn by us, so the result
  does not depend on how a transformers release initialises modules).
- ``tokenizer.json``, ``tokenizer_config.json``, ``chat_template.jinja``: a character-level tokenizer built
  with the ``tokenizers`` library and saved with ``PreTrainedTokenizerFast.save_pretrained``. It is a
  byte-level BPE in exactly Qwen2's pipeline (NFC, Qwen2's split regex, ``ByteLevel``) with no merges
  between ASCII bytes, so every ASCII character is one token. Qwen2's own layout is required, not just
  convenient: for a ``model_type: qwen2`` directory transformers 5's ``AutoTokenizer`` always builds
  ``Qwen2Tokenizer``, which reads only the vocabulary and merges from tokenizer.json and puts its own
  normalizer/pre-tokenizer/decoder around them (a ``WordLevel`` character tokenizer would silently lose
  every space and newline).

Token ids: the characters of ``vocab`` come first, one token each, in their given order
(``DEFAULT_CHARS`` = ``\\t``, ``\\n``, then printable ASCII 32..126: ids 0..96); then every byte not yet
covered (ids 97..255 by default); then ``SPECIAL_TOKENS`` in order: ``<|endoftext|>`` (pad, 256),
``<|im_start|>`` (257), ``<|im_end|>`` (eos, 258). With the default vocab that is 259 tokens, and
``config.vocab_size == len(tokenizer)``, so logits are ``[B, T, 259]``. There is no unk token. With
``vocab_size=N`` (benchmarks: a real vocabulary's size such as 32000), filler tokens ``<filler_0>``, ... fill
the ids before the special tokens, which then are the last three (``N-3``..``N-1``), so the embedding, the LM
head and the logits have ``N`` rows like a real checkpoint's; no text encodes to a filler. Token
*strings* are byte-level symbols as in GPT-2/Qwen: ``" "`` is ``"Ġ"``, ``"\\n"`` is ``"Ċ"``, ``"\\t"`` is
``"ĉ"``; ``decode`` maps them back.

Characters outside ``vocab`` are handled explicitly by byte fallback: such a character (``é``, ``€``, emoji,
control characters such as ``\\r``) becomes one token per UTF-8 byte (ASCII ones are always single tokens), so
every NFC-normalised string round-trips through ``encode``/``decode`` and nothing maps to an unk. A
non-ASCII character listed in ``vocab`` is one token, through BPE merges of its UTF-8 bytes. Special tokens
written literally in text (``"<|im_end|>"``) are matched as single special ids, as in Qwen.

Chat template: ChatML as Qwen uses it, ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message, no
default system prompt, and ``add_generation_prompt`` appending ``<|im_start|>assistant\\n``. For assistant
messages the content *and its closing* ``<|im_end|>`` sit inside ``{% generation %}...{% endgeneration %}``,
so ``apply_chat_template(..., return_dict=True, return_assistant_tokens_mask=True)`` returns
``assistant_masks`` that are 1 exactly on the tokens the policy must learn to produce (its words and its stop
token) and 0 on the ``<|im_start|>assistant\\n`` header and the ``\\n`` after ``<|im_end|>``. ``content``
may be a string, None, or a list of ``{"type": "text", "text": ...}`` parts (their texts are concatenated;
other parts dropped).

Model families: all of the above describes the default, ``family="qwen2"``. ``family`` also builds
``"qwen3"``, ``"llama3"``, ``"mistral"``, ``"gemma2"`` and ``"phi3"`` models (``families.py``). Each gets its
family's config class and architecture options: Qwen3's q/k norms, Llama 3's rope scaling, a sliding window
of 8 for Mistral and Gemma 2, and Gemma 2's soft-capping and tied embeddings; Phi-3's fused projections come
with its architecture. Each also gets the family's special tokens, appended as single tokens after the bytes
in place of Qwen's three, its bos / eos / pad and its stop tokens in generation_config.json, and a head size
of 32 (vLLM's CPU backend refuses 16). Nothing else changes: the same characters, ids 0..255, the same byte
fallback. Llama 3, Mistral and Gemma 2 tokenizers put bos in front of encoded text, as theirs do.
tokenizer_config.json declares ``PreTrainedTokenizerFast`` for them (Qwen3: ``Qwen2Tokenizer``), so
transformers 4 and 5 load tokenizer.json as written. The caller passes the chat template as text
(``chat_template=``; for instance a family's real template, which the tests keep as fixtures); without one,
only qwen2 gets the ChatML template above and the other families get none. The builder ships no third-party
template.

Command line: ``python -m posttrain_worker.models.tiny DIR [--seed N] [--family F] [--chat-template FILE]
[--hidden-size H] [--vocab-size N] ...`` (``--help``).

One module per job: ``families`` (per family: config, tokens, stop tokens), ``tokenizer`` (characters,
specials, chat template), ``weights`` (architecture and seeded weights), ``build`` (``make_tiny_model``: the
directory), ``cli`` (the command line).
"""

from __future__ import annotations

from posttrain_worker.models.tiny.build import WRITTEN_FILES, make_tiny_model
from posttrain_worker.models.tiny.families import FAMILY_NAMES
from posttrain_worker.models.tiny.tokenizer import DEFAULT_CHARS, SPECIAL_TOKENS, TINY_CHAT_TEMPLATE

__all__ = [
    "DEFAULT_CHARS",
    "FAMILY_NAMES",
    "SPECIAL_TOKENS",
    "TINY_CHAT_TEMPLATE",
    "WRITTEN_FILES",
    "make_tiny_model",
]
