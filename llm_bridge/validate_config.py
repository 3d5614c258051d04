"""What ``python -m llm_bridge.validate`` measures, in one checked object (:class:`ValidateConfig`).

Every option of :func:`llm_bridge.validate.validate` is a field here; the object checks them all when it is made, so
a bad option is refused with the option's name before any model loads, and the command, the GPU suite and the tests
build one object instead of passing thirty keywords::

    config = ValidateConfig(draft="int8", verifiers=("token",), lengths=(2, 4), prompts=8, hf=False)
    record = validate(config)
    wider = validate(config.but(batch_size=4))
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from otspec.checks import MAX_DRAFT_LENGTH, check_flag, check_progress, check_real, check_size
from otspec.clitools import writable_file
from otspec.distributions import resolve_device
from otspec.engine.trie import RULES, check_tree_verifier
from otspec.verifiers import REGISTRY, TREE_VERIFIERS

from .cache import CACHE_KINDS
from .logrows import DEFAULT_LOG_MAX_KEPT, DEFAULT_LOG_TOP_P
from .loop import check_pairing
from .models import DEFAULT_TARGET, DTYPE_NAMES, check_model_spec
from .options import Changeable
from .prompts import DATA_DIR, read_prompts
from .sampling import Sampling
from .trees import parse_tree

__all__ = ["MAX_NEW_TOKENS", "PROMPT_FILE", "ValidateConfig", "prompt_lines"]

#: The prompt file of the measured and the prediction prompts.
PROMPT_FILE = "validate_prompts.txt"


def prompt_lines(prompts: int, prediction_prompts: int | None = None, pool: int | None = None) -> tuple[list, list]:
    """(measured, prediction) line indices of :data:`PROMPT_FILE` (of ``pool`` lines; default: read it), disjoint;
    ``ValueError`` where the file holds too few."""
    prediction_prompts = prompts if prediction_prompts is None else prediction_prompts
    pool = len(read_prompts(DATA_DIR / PROMPT_FILE)) if pool is None else pool
    if prompts + prediction_prompts > pool:
        raise ValueError(f"--prompts {prompts} and --prediction-prompts {prediction_prompts}: the prompt file holds "
                         f"{pool}, and the prediction prompts must differ from the measured ones")
    return list(range(prompts)), list(range(prompts, prompts + prediction_prompts))


#: Most positions (batch × a tree's tokens + 1) one target call of a tree run may score: each is a row of V logits
#: (49,152 for the default pair: 4,096 rows are 0.8 GB in float32). Real trees score tens of tokens a sequence.
MAX_CALL_POSITIONS = 4096


#: Most tokens one prompt decodes in a validation (the default target's context is 8,192 tokens; a run of 10^9
#: tokens was started and never ended). Checked before any model loads.
MAX_NEW_TOKENS = 8192


@dataclass(frozen=True)
class ValidateConfig(Changeable):
    """The options of a validation run (``python -m llm_bridge.validate``'s flags), checked and normalised.

    Models: ``target``, ``draft``, ``device``, ``dtype``. Runs: chain ``verifiers`` × draft ``lengths``; ``trees``
    (k-configs, ``iid:K:L``, ``eagle2:D:K:M``) × ``multi_verifiers`` under the tree walk ``rule``, or ``tree_pairs``
    (per (verifier, tree) pair). Decoding: ``prompts`` measured prompts × ``max_new_tokens`` tokens, sampling
    (``temperature``, ``top_k``, ``top_p``), ``seed``, ``batch_size``, ``cache`` (a kind of
    :func:`~llm_bridge.cache.make_cache`; ``auto``: compiled static on CUDA, dynamic on CPU), ``progress``.
    Predictions: ``prediction_prompts`` (default: as many as ``prompts``; the prompts after the measured ones, where
    the plain-decoding log and the cost profile are measured), ``prediction_paths`` plain paths of each,
    ``prediction_sequences`` replays of each path; ``log_rows`` (a path: also write the logged rows there, top-p
    ``log_top_p``, at most ``log_max_kept`` tokens a row). Timing: ``timing_attempts``, ``pairing``. Peers and
    checks: ``hf`` (Hugging Face assisted generation, its draft chosen on ``hf_prompts`` prediction prompts),
    ``lossless_samples`` draws per side of the two-sample test (0: the exact laws only) for ``lossless_verifiers``
    (default: every verifier run).
    """

    target: str = DEFAULT_TARGET
    draft: str = "distilled"
    verifiers: tuple = ("token", "block", "block_v1")
    lengths: tuple = (2, 4, 8)
    prompts: int = 32
    max_new_tokens: int = 64
    device: str = "auto"
    dtype: str = "float32"
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    batch_size: int = 8
    lossless_samples: int = 200
    hf: bool = True
    progress: bool | None = None
    trees: tuple = ()
    multi_verifiers: tuple = ("kseq", "multiround")
    rule: str = "match"
    cache: str = "auto"
    log_rows: str | Path | None = None
    log_top_p: float = DEFAULT_LOG_TOP_P
    log_max_kept: int | None = DEFAULT_LOG_MAX_KEPT
    prediction_sequences: int = 32
    lossless_verifiers: tuple | None = None
    hf_prompts: int = 4
    timing_attempts: int = 1
    prediction_prompts: int | None = None
    prediction_paths: int = 1
    pairing: str | None = None
    tree_pairs: tuple | None = None

    def __post_init__(self):
        put = object.__setattr__
        for name in ("verifiers", "lengths", "trees", "multi_verifiers", "lossless_verifiers", "tree_pairs"):
            value = getattr(self, name)  # a text would be read as its characters ('token': t, o, k, e, n)
            if value is not None and (isinstance(value, str | bytes) or not isinstance(value, list | tuple)):
                raise ValueError(f"{name}: expected a list or tuple, got {type(value).__name__} {value!r:.40}")
            keys = [str(parse_tree(t)) if name == "trees" else repr(t) for t in value] if value is not None else []
            if name != "tree_pairs" and len(set(keys)) < len(keys):  # '2X1' and 'iid:2:1' are the tree 2x1
                raise ValueError(f"{name}: {list(value)} names one twice (each is run once)")
        if self.tree_pairs is not None and not all(isinstance(p, list | tuple) and len(p) == 2
                                                   and all(isinstance(x, str) for x in p) for p in self.tree_pairs):
            raise ValueError(f"tree_pairs: expected (verifier, tree) pairs of names, got {self.tree_pairs!r:.80}")
        check_flag(self.hf, "hf")
        check_progress(self.progress)
        for name in ("prompts", "max_new_tokens", "batch_size", "prediction_sequences", "prediction_paths",
                     "hf_prompts"):
            put(self, name, check_size(getattr(self, name), name))
        check_size(self.max_new_tokens, "max_new_tokens", limit=MAX_NEW_TOKENS, limit_name="MAX_NEW_TOKENS")
        put(self, "lengths", tuple(check_size(L, "L", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
                                   for L in self.lengths))
        put(self, "verifiers", tuple(self.verifiers))
        if self.prediction_prompts is not None:
            put(self, "prediction_prompts", check_size(self.prediction_prompts, "prediction_prompts"))
        if not (self.lengths and self.verifiers) and not (self.trees or self.tree_pairs):
            raise ValueError("L, verifiers: no draft length with a verifier and no --trees: nothing to run (give --L "
                             "2,4 --verifiers token,block, or --trees 2x1)")
        for what, names, known in (("verifiers", self.verifiers, REGISTRY),
                                   ("lossless verifiers", self.lossless_verifiers or (), REGISTRY)):
            unknown = [v for v in names if v not in known]
            if unknown:
                raise ValueError(f"{what} {unknown}: expected names among {sorted(known)}")
        if self.lossless_verifiers is not None:
            put(self, "lossless_verifiers", tuple(self.lossless_verifiers))
        prompt_lines(self.prompts, self.prediction_count)  # the prompt file holds both sets
        if self.lossless_samples < 0:
            raise ValueError(f"lossless_samples: expected >= 0 (0 skips the two-sample test), got "
                             f"{self.lossless_samples}")
        self._check_trees()
        self._check_run_options()
        if self.cache not in CACHE_KINDS:
            raise ValueError(f"cache: expected one of {CACHE_KINDS}, got {self.cache!r}")
        if self.log_rows is not None:  # a file, a device, /proc, a loop, a link to nothing: refused before any model
            writable_file(self.log_rows, "--log-rows")
        from .drafters import DRAFTERS

        check_model_spec(self.target, "target")  # last: every other option is named first
        if str(self.draft).partition(":")[0] not in DRAFTERS:
            check_model_spec(self.draft, "draft")

    def _check_run_options(self) -> None:
        """Every option that would otherwise be refused only once the models are loaded (or after the run)."""
        from .drafters import check_drafter_spec

        check_drafter_spec(self.draft, self.target)  # ngram:0, layers:-1 or past the target's, head: of no folder
        self.sampling  # temperature, top_k, top_p  # noqa: B018
        if self.dtype not in DTYPE_NAMES:
            raise ValueError(f"dtype: expected one of {DTYPE_NAMES}, got {self.dtype!r}")
        resolve_device(self.device)  # a name torch knows, on a device that is here
        if self.rule not in RULES:
            raise ValueError(f"rule: expected one of {RULES}, got {self.rule!r}")
        check_size(self.seed, "seed", minimum=0)
        check_size(self.timing_attempts, "timing_attempts", limit=100, limit_name="100")
        if self.pairing is not None:
            check_pairing(self.pairing)
        check_real(self.log_top_p, "log_top_p", low=0.0, high=1.0, low_open=True)
        if self.log_max_kept is not None:
            check_size(self.log_max_kept, "log_max_kept")

    def _check_trees(self) -> None:
        """Trees and multi-draft verifiers: known names, verifiers that can verify their trees."""
        put = object.__setattr__
        put(self, "trees", tuple(self.trees))
        put(self, "multi_verifiers", tuple(self.multi_verifiers))
        if self.tree_pairs is not None and len(self.tree_pairs) == 0:
            raise ValueError("tree_pairs: an empty list runs no tree; give (verifier, tree) pairs, or None to run every "
                             "multi-draft verifier on every tree of trees")
        if self.tree_pairs:
            put(self, "tree_pairs", tuple((str(v), str(t)) for v, t in self.tree_pairs))
        unknown = [v for v in dict.fromkeys((*self.multi_verifiers, *self.run_multi_verifiers))
                   if v not in TREE_VERIFIERS]
        if unknown:
            raise ValueError(f"multi-draft verifiers {unknown}: expected names among {sorted(TREE_VERIFIERS)}")
        widest = max([parse_tree(t).num_tokens + 1 for t in self.run_trees], default=0)
        if self.batch_size * widest > MAX_CALL_POSITIONS:
            raise ValueError(f"--trees: a target call would score batch {self.batch_size} x {widest:,} positions "
                             f"= {self.batch_size * widest:,} rows of V logits (limit MAX_CALL_POSITIONS = "
                             f"{MAX_CALL_POSITIONS:,}): a smaller tree, or a smaller batch")
        chosen = [t for t in self.run_trees if parse_tree(t).deterministic]
        wrong = [v for v in self.run_multi_verifiers if not TREE_VERIFIERS[v].any_candidates]
        if chosen and wrong and not self.tree_pairs:
            raise ValueError(f"--trees {','.join(chosen)}: EAGLE-2 trees choose their candidates (top-k); verifiers "
                             f"{wrong} assume drawn ones. Use --multi-verifiers naive")
        pairs = self.tree_pairs or [(v, t) for v in self.run_multi_verifiers for t in self.run_trees]
        for name, tree in pairs:  # every pair run (--trees x --multi-verifiers too), before any model loads
            check_tree_verifier(TREE_VERIFIERS[name](), parse_tree(tree, TREE_VERIFIERS[name]().replacement))

    @property
    def sampling(self) -> Sampling:
        """Both models' sampling: ``temperature``, ``top_k``, ``top_p``."""
        return Sampling(self.temperature, self.top_k, self.top_p)

    @property
    def prediction_count(self) -> int:
        """How many prediction prompts: ``prediction_prompts``, or as many as ``prompts``."""
        return self.prompts if self.prediction_prompts is None else self.prediction_prompts

    @property
    def run_trees(self) -> tuple:
        """The trees run (each as its spec string): those of ``tree_pairs``, else ``trees``."""
        trees = dict.fromkeys(t for _, t in self.tree_pairs) if self.tree_pairs else self.trees
        return tuple(str(parse_tree(t)) for t in trees)

    @property
    def run_multi_verifiers(self) -> tuple:
        """The multi-draft verifiers run: those of ``tree_pairs``, else ``multi_verifiers`` where there are trees."""
        if self.tree_pairs:
            return tuple(dict.fromkeys(v for v, _ in self.tree_pairs))
        return self.multi_verifiers if self.trees else ()

    @property
    def tree_configs(self) -> list:
        """(verifier name, tree spec) of every tree run: ``tree_pairs``, else every verifier × tree."""
        return list(self.tree_pairs or [(v, t) for v in self.run_multi_verifiers for t in self.run_trees])
