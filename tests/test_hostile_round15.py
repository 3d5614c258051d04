"""Round fourteen of hostile inputs, continued (issue 43): the auditor under samplers that fork, redirect or signal,
and the findings of round fifteen's re-check; one test per class, each able to fail on the old code."""

from __future__ import annotations

import json

import pytest


def call_token(*args):
    from otspec.audit.adapters import token

    return token(*args)


def forks_a_pool(*args):
    """A lossless sampler that hands its call to a forked multiprocessing pool (whose workers end with os._exit)."""
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(1) as pool:
        return pool.apply(call_token, args)


def points_stdout_at_devnull(*args):
    """A lossless sampler that points descriptor 1 at /dev/null (the verdict's descriptor)."""
    import os

    from otspec.audit.adapters import token

    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    return token(*args)


def terminates_its_parent(*args):
    """A sampler that sends SIGTERM to the process that started it (the command, around the audit's child)."""
    import os
    import signal
    import time

    os.kill(os.getppid(), signal.SIGTERM)
    time.sleep(5)
    raise AssertionError("the parent should have ended this process")


def interrupts_its_parent(*args):
    import os
    import signal
    import time

    os.kill(os.getppid(), signal.SIGINT)
    time.sleep(30)  # the parent ends this process at once (3 s was too short on a loaded machine)
    raise AssertionError("the parent should have ended this process")


def _as_from_a_terminal():
    """The command starts as from a shell: SIGINT handled and not blocked (a test runner's worker may ignore or block
    it, and a child inherits both; the command then never saw the sampler's SIGINT)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="fork")
def test_an_audit_survives_a_sampler_that_forks_redirects_or_signals_its_parent():
    """In process, a pool worker's os._exit was refused (the worker ran on as a copy of the audit: a hang and a false
    error line) and a sampler pointing descriptor 1 at /dev/null left exit 0 with no verdict anywhere; from the
    command line, a sampler that SIGTERMs the command left status 143 and no line, and one that SIGINTs it left the
    child to print a traceback after the command had ended."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent

    def audit(sampler, *flags):
        return subprocess.run([sys.executable, "-m", "otspec", "audit", f"tests.test_hostile_round15:{sampler}",
                               "--samples", "300", *flags], cwd=root, capture_output=True, text=True, timeout=120,
                              preexec_fn=_as_from_a_terminal)

    pooled = audit("forks_a_pool", "--in-process")
    assert pooled.returncode == 0 and "verdict" in pooled.stdout and "error" not in pooled.stderr, pooled.stderr
    redirected = audit("points_stdout_at_devnull", "--in-process", "--json")
    assert redirected.returncode == 0 and json.loads(redirected.stdout)["verdict"], redirected
    terminated = audit("terminates_its_parent")
    assert terminated.returncode == 2 and "sent SIGTERM" in terminated.stderr, terminated
    assert len(terminated.stderr.strip().splitlines()[-1:]) == 1 and "Traceback" not in terminated.stderr
    interrupted = audit("interrupts_its_parent")
    assert interrupted.returncode == 130 and "Traceback" not in interrupted.stderr, interrupted.stderr


def test_validate_names_the_flag_not_the_parameter(capsys):
    """validate's settings errors named the Python parameter (max_new_tokens, top_p) a command line user never typed."""
    from llm_bridge.validate import main
    from tests.cli_refusals import refused

    refused(main, ["--max-new-tokens", "0"], capsys, "--max-new-tokens: expected an integer >= 1")
    refused(main, ["--top-p", "2"], capsys, "--top-p:")


def test_command_line_flags_a_run_would_ignore_are_refused(capsys):
    """decode --t-target without --t-draft, calc block --max-length without --cost-ratio, simulate --device with
    --tree and --draw without --tree ran with the flag ignored."""
    from otspec.cli import main
    from tests.cli_refusals import refused

    pair = ["--draft", "0.3,0.7", "--target", "0.75,0.25"]
    refused(main, ["decode", *pair, "--L", "2", "--tokens", "20", "--t-target", "5"], capsys, "--t-target", "--t-draft")
    refused(main, ["calc", "block", *pair, "--L", "2", "--max-length", "8"], capsys, "--max-length", "--cost-ratio")
    refused(main, ["simulate", *pair, "--verifier", "kseq", "--tree", "2x1", "--blocks", "100", "--device", "cpu"],
            capsys, "--device")
    refused(main, ["simulate", *pair, "--L", "2", "--blocks", "100", "--draw", "greedy"], capsys, "--draw", "--tree")
    assert main(["decode", *pair, "--L", "2", "--tokens", "20", "--t-draft", "0.1", "--t-target", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cost"]
    assert main(["calc", "block", *pair, "--L", "2", "--cost-ratio", "0.1", "--max-length", "8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["best_length_searched"]
    assert main(["simulate", *pair, "--L", "2", "--blocks", "100", "--without-replacement", "--json"]) == 0  # a chain


def test_theory_functions_read_their_numbers_as_numbers():
    """bernoulli_alpha('0.3', ...), kseq_beta(p, q, True), positional_window_values([['0.5', 0.4]]) and
    tokens_per_iteration(True) read text and booleans with float(); kseq_rho_star took sources to a TypeError and a
    text tol to a traceback."""
    from otspec import IIDSource
    from otspec import theory as T

    calls = [(T.bernoulli_alpha, ("0.3", 0.5, 2), "draft_p"), (T.bernoulli_alpha, (0.3, True, 2), "target_p"),
             (T.kseq_beta, ([0.3, 0.7], [0.6, 0.4], True), "rho"),
             (T.positional_window_values, ([["0.5", 0.4]],), "overlaps"),
             (T.tokens_per_iteration, ("1.5",), "expected_accepted"), (T.tokens_per_iteration, (True,), "expected"),
             (T.kseq_rho_star, (IIDSource([0.3, 0.7]), IIDSource([0.6, 0.4]), 2), "draft: expected probability rows")]
    for fn, args, needle in calls:
        with pytest.raises(ValueError, match=needle):
            fn(*args)
    with pytest.raises(ValueError, match="tol"):
        T.kseq_rho_star([0.3, 0.7], [0.6, 0.4], 2, tol="1e-9")
    assert T.bernoulli_alpha(0.25, 0.75, 2) == 0.6875 and T.tokens_per_iteration(0.75) == 1.75
    assert T.positional_window_values([[0.5, 1.0]]) == (1.0, 1.0)


def test_round_fifteen_leftovers(capsys, monkeypatch):
    """adaptive and validate --no-hf --hf-prompts 2 went on to load the target with the flag ignored; adaptive read
    --thresholds 0_5 with float(); kseq_parameters given single rows blamed k; over_acceptance_kernel took eps '0.1'
    to numpy's ufunc error and NaN to rows of NaN."""
    import numpy as np

    import llm_bridge.adaptive
    import llm_bridge.validate
    from llm_bridge.adaptive import main as adaptive_main
    from llm_bridge.validate import main as validate_main
    from otspec import theory as T
    from tests.cli_refusals import refused

    def loaded(*args, **kwargs):
        raise AssertionError("a model was loaded before the flags were checked")

    monkeypatch.setattr(llm_bridge.adaptive, "run", loaded)
    monkeypatch.setattr(llm_bridge.validate, "validate", loaded)
    refused(adaptive_main, ["--no-hf", "--hf-prompts", "2"], capsys, "--hf-prompts", "ignore")
    refused(validate_main, ["--no-hf", "--hf-prompts", "2"], capsys, "--hf-prompts", "ignore")
    refused(adaptive_main, ["--thresholds", "0_5"], capsys, "--thresholds")
    with pytest.raises(ValueError, match=r"expected two batches of rows of one shape \(B, V\)"):
        T.kseq_parameters(np.array([0.3, 0.7]), np.array([0.6, 0.4]), 2)
    assert T.kseq_parameters(np.array([[0.25] * 4]), np.array([[0.5, 0.5, 0.0, 0.0]]), 2).p_acc[0] == 0.75
    for eps in ("0.1", float("nan"), None):
        with pytest.raises(ValueError, match="eps"):
            T.over_acceptance_kernel(np.array([0.3, 0.7]), np.array([0.6, 0.4]), eps)
