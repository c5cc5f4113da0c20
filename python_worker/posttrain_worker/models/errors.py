"""Error codes of model hosting (in addition to the protocol's, docs/protocol.md)."""

MODEL_NOT_FOUND = "MODEL_NOT_FOUND"
"""The path is not a local directory, and the hub (reached) has no such model."""
MODEL_NOT_CACHED = "MODEL_NOT_CACHED"
"""A Hub id the worker cannot fetch (offline, ``HF_HUB_OFFLINE=1``, or the hub unreachable) and that is not in
the Hugging Face cache; the message names the id, the cache directory and how to populate it."""
MODEL_LOAD_FAILED = "MODEL_LOAD_FAILED"
"""The directory exists but holds no usable causal LM: no tokenizer, not a causal LM, unreadable weights."""
MODEL_NOT_LOADED = "MODEL_NOT_LOADED"
"""No model is loaded under that name."""
MODEL_ALREADY_LOADED = "MODEL_ALREADY_LOADED"
"""A model is already loaded under that name (unload it first, or pass ``replace``)."""
BACKEND_UNAVAILABLE = "BACKEND_UNAVAILABLE"
"""The requested backend (``"vllm"``) cannot be imported in this worker; the message names the package."""
ASSISTANT_MASK_UNAVAILABLE = "ASSISTANT_MASK_UNAVAILABLE"
"""The chat template has no ``{% generation %}`` markers and its renderings do not let a row's assistant
tokens be located (docs/history.md, "Assistant masks"); the message names the row, the model and the
reason."""
ASSISTANT_MASK_EMPTY = "ASSISTANT_MASK_EMPTY"
"""A row holds an assistant message but its assistant mask selects no token (an assistant-only loss would
silently skip it); the message names the row and the model."""
