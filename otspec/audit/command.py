"""``python -m otspec audit SAMPLER``: the audit from the command line (exit 0: no bias detected at this power,
1: a test failed — biased, or with ``--verifier`` not that verifier —, 2: bad input — a sampler that cannot be
loaded, raises, exits, breaks the protocol or hangs)."""

from __future__ import annotations

import contextlib
import os
import sys

from ..clitools import path_argument, real, writable_folder

__all__ = ["add_audit_parser"]


def _run(args) -> dict:
    """From the command line (``main()`` reading ``sys.argv``) the audit runs in a child process unless
    ``--in-process``: a sampler that ends its process then cannot end the command with a status that reads as a
    verdict (:mod:`otspec.audit.isolate`)."""
    from .isolate import OUTCOME_ENV, run_isolated

    if getattr(args, "command_line", False) and not args.in_process and OUTCOME_ENV not in os.environ:
        return run_isolated(args)
    return audit_in_process(args)


def audit_in_process(args) -> dict:
    """The audit ``args`` asks for, in this process (the result dict the command prints, with its exit status)."""
    from .protocol import HARD_EXIT, no_hard_exit

    HARD_EXIT["allowed"] = True  # a sampler that disables both interrupts ends this command (exit 2), never hangs it
    streams = sys.stdout, sys.stderr  # a sampler that replaces them (None, a StringIO) would swallow the verdict
    saved = _saved_descriptors()  # and one that points descriptor 1 or 2 elsewhere (os.dup2 onto /dev/null) too
    try:
        if 1 in saved and 2 in saved:  # the sampler's prints go to stderr, as in the child process: stdout holds
            sys.stdout.flush()  # the report alone (with --json, one JSON document)
            os.dup2(2, 1)
        with no_hard_exit(), contextlib.redirect_stdout(sys.stderr):  # a sampler's os._exit is its error
            return _audit(args)
    finally:
        HARD_EXIT["allowed"] = False  # main() called in a user's own process leaves it as it found it
        sys.stdout, sys.stderr = streams
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)


def _saved_descriptors() -> dict:
    """Copies of the standard output and error descriptors, by descriptor, to put back after the sampler (those
    that are open)."""
    saved = {}
    for fd in (1, 2):
        try:
            saved[fd] = os.dup(fd)
        except OSError:  # closed before the audit: nothing to restore
            pass
    return saved


def _audit(args) -> dict:
    from .adapters import hf_version
    from .card import write_card, write_exact_card
    from .core import audit, failed_statistics
    from .exact import exact_audit
    from .rows import synthetic_pool

    if args.out is not None:  # checked before the audit runs, not after it
        writable_folder(args.out, "--out")
    if args.exact:
        if args.rows is not None:
            raise ValueError("--rows: the exact audit enumerates synthetic rows of a small vocabulary (--vocab <= 8); "
                             "logged rows are audited without --exact")
        report = exact_audit(args.sampler, vocab=args.vocab or 3, draft_length=args.draft_length, seed=args.seed,
                             alpha=args.alpha, verifier=args.verifier, timeout=args.timeout, draws=args.samples)
        if args.out is not None:
            report["card"] = write_exact_card(report, args.out)
        return {**report, "_exit_status": 0 if report["verdict"] == "no bias detected" else 1}
    if args.rows is not None and args.vocab is not None:
        raise ValueError("--vocab sizes the synthetic rows; a --rows file has its own vocabulary (give one of them)")
    rows = args.rows if args.rows is not None else synthetic_pool(vocab=args.vocab or 64,
                                                                  draft_length=args.draft_length, seed=args.seed)
    report = audit(args.sampler, samples=args.samples, rows=rows, draft_length=args.draft_length, seed=args.seed,
                   alpha=args.alpha, verifier=args.verifier, timeout=args.timeout, progress=not args.json)
    out = report.as_dict()
    out.pop("bins")
    if args.out is not None:
        out["card"] = write_card(report, args.out)
    if "hf_speculative_sampling" in str(args.sampler):
        out["transformers"] = hf_version()
    status = 1 if report.failed else 0
    if args.json:
        return {**out, "_exit_status": status}
    need = dict(zip(out["power"]["deltas"], out["power"]["samples_for_power_0.99"], strict=True))
    first = out["bias"]["first_token"]
    return {"sampler": out["sampler"], "verdict": out["verdict"],
            "failed_tests": failed_statistics(out), "p_value": out["p_value"],
            "samples": out["samples"], "rows": out["rows"],
            "bias_first_token": f"binned TV {first['binned_tv']:.4f} [{first['low']:.4f}, {first['high']:.4f}] (total "
            "variation over the PIT bins: a lower bound on the token-level bias; raw "
            f"{first['binned_tv_raw']:.4f}, unbiased samplers stay below {first['null_level']:.4f})",
            "samples_to_detect_tv_0.02": round(need[0.02]), "mean_accepted": out["acceptance"]["mean_accepted"],
            **({"transformers": out["transformers"]} if "transformers" in out else {}),
            **({"card": out["card"]} if "card" in out else {}), "_exit_status": status}


def _adapter_names() -> list[str]:
    from .adapters import ADAPTERS

    return list(ADAPTERS)


def add_audit_parser(sub, formatter, json_flag) -> None:
    from ..clitools import positive_int, seed
    from .core import DEFAULT_SAMPLES
    from .protocol import DEFAULT_TIMEOUT_S

    p = sub.add_parser("audit", help="test whether a speculative sampler (module:function) keeps the target's law",
                       formatter_class=formatter, description=(
                           "Drive SAMPLER(draft_tokens, draft_probs, target_probs, rng) -> (accepted, next_token) over "
                           "many draft/target row pairs and test what it emits against the target rows. Exit status 0: "
                           "no bias detected at this power; 1: biased; 2: bad input. Adapters: "
                           f"otspec.audit.adapters:{'|'.join(_adapter_names())}; known failures: "
                           "otspec.audit.catalogue:<name>."))
    p.add_argument("sampler", metavar="SAMPLER", help="module:function of the sampler to audit")
    p.add_argument("--rows", metavar="FILE", default=None,
                   help="a logged-rows .npz (python -m llm_bridge.validate --log-rows) instead of synthetic rows")
    p.add_argument("--samples", type=positive_int, default=DEFAULT_SAMPLES,
                   help="sampler outputs to test (with --exact: uniform draws per drafted block)")
    p.add_argument("--draft-length", type=positive_int, default=2, help="drafts L per call (at most 64)")
    p.add_argument("--vocab", type=positive_int, default=None,
                   help="vocabulary of the synthetic rows (default 64; with --exact 3, at most 8)")
    p.add_argument("--verifier", default=None, help="the chain verifier the sampler claims to be (token, block, gumbel): "
                   "also test its accepted length against that verifier's exact value")
    p.add_argument("--alpha", type=real, default=1e-3, help="test level (after Bonferroni over the tests)")
    p.add_argument("--seed", type=seed, default=0, help="random seed (an integer >= 0)")
    p.add_argument("--timeout", type=real, default=DEFAULT_TIMEOUT_S, help="seconds one sampler call may take")
    p.add_argument("--exact", action="store_true", help="exact audit on a small vocabulary: every drafted block "
                   "enumerated, the output law compared with the target law")
    p.add_argument("--in-process", action="store_true", help="run the sampler in this process rather than a child "
                   "(os._exit, exec, abort and signals it sends itself are then refused as its error, but a crash in "
                   "native code ends the audit without a verdict, and a native loop past --timeout cannot be stopped)")
    p.add_argument("--out", type=path_argument, default=None, help="write the report card (audit.md, audit.json, audit.png; "
                   "with --exact: audit.md and audit.json) here")
    json_flag(p)
    p.set_defaults(run=_run)
