"""otspec audit under hostile input (issue 43): its options, samplers that exit, disable the guard or fail to import,
sizes refused before anything is allocated, and verdicts that say which test failed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from otspec.audit import SamplerError, SamplerTimeout, audit
from otspec.audit import core as audit_core
from otspec.audit.adapters import token
from otspec.audit.rows import MAX_POOL_ENTRIES, synthetic_pool
from otspec.cli import main

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "otspec.audit.adapters:token"


def exits(*args):
    sys.exit(0)


def cancels_the_timer(*args):
    signal.setitimer(signal.ITIMER_REAL, 0.0)
    time.sleep(30)


def ignores_the_alarm(*args):
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    time.sleep(30)


def ignores_every_interrupt(*args):
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    time.sleep(30)


def ends_the_process_with_0(*args):
    os._exit(0)


def ends_the_process_with_1(*args):
    os._exit(1)


def kills_its_process(*args):
    os.kill(os.getpid(), signal.SIGKILL)


def kills_its_process_natively(*args):  # past the audit's guard on os.kill: the C library's own kill()
    import ctypes

    ctypes.CDLL(None).kill(os.getpid(), signal.SIGKILL)


def closes_stderr(*args):
    os.close(2)
    return token(*args)


def whole_floats(draft_tokens, draft_probs, target_probs, rng):
    tau, tok = token(draft_tokens, draft_probs, target_probs, rng)
    return tau.astype(float), tok.astype(float)


def cli(argv, capsys) -> tuple[int, str, str]:
    status = main(argv)
    out = capsys.readouterr()
    return status, out.out, out.err


def test_a_sampler_that_exits_gets_exit_2_and_a_line_never_exit_0(capsys):
    with pytest.raises(SamplerError, match=r"called sys.exit\(0\)"):
        audit(exits, samples=200, progress=False)
    status, out, err = cli(["audit", "tests.test_audit_hostile:exits", "--samples", "200", "--json"], capsys)
    assert status == 2 and "called sys.exit(0)" in err and len(err.strip().splitlines()) == 1 and out == ""


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e9"])
def test_a_timeout_that_would_disable_the_guard_is_refused(value, capsys):
    status, _, err = cli(["audit", TOKEN, "--samples", "200", "--timeout", value], capsys)
    assert status == 2 and "timeout" in err and "Traceback" not in err
    with pytest.raises(ValueError, match="timeout"):
        audit(token, samples=200, timeout=float(value), progress=False)


@pytest.mark.parametrize("sampler", [cancels_the_timer, ignores_the_alarm], ids=["cancels", "ignores"])
def test_a_sampler_that_disables_the_timer_still_times_out(sampler):
    previous = signal.getsignal(signal.SIGALRM)
    t0 = time.perf_counter()
    try:
        with pytest.raises(SamplerTimeout, match="disabled the audit's timer"):
            audit(sampler, samples=200, timeout=0.5, progress=False)
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert time.perf_counter() - t0 < 5


def test_a_sampler_that_ignores_every_interrupt_ends_the_command_with_exit_2():
    """The timeout also bounds importing the sampler's module: 5 s, not 0.5 s, so that a loaded machine does not end the
    audit at the import instead (the sampler sleeps 30 s, so the guard still has to end it)."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "otspec", "audit", "tests.test_audit_hostile:ignores_every_interrupt",
                           "--samples", "200", "--timeout", "5"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "disabled the audit's interrupts" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and time.perf_counter() - t0 < 30


@pytest.mark.parametrize("sampler,ended", [("ends_the_process_with_0", "called os._exit(0)"),
                                           ("ends_the_process_with_1", "called os._exit(1)"),
                                           ("kills_its_process", "on its own process"),
                                           ("kills_its_process_natively",
                                            "(killed by signal SIGKILL) before a verdict")])
def test_a_sampler_that_ends_its_process_never_leaves_a_verdict_behind(sampler, ended):
    """From the command line the audit runs in a child process: a sampler calling os._exit or os.kill on itself
    (which raise there, as in ``--in-process``) or killing itself past them is exit 2 with one line saying so, never
    exit 0 or 1 read as a verdict."""
    for mode in ([], ["--in-process"]) if sampler == "ends_the_process_with_0" else ([],):
        proc = subprocess.run([sys.executable, "-m", "otspec", "audit", f"tests.test_audit_hostile:{sampler}",
                               "--samples", "200", "--json", *mode], cwd=ROOT, capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stdout)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and ended in lines[0], proc.stderr


def test_a_sampler_that_closes_a_standard_stream_is_told_so():
    proc = subprocess.run([sys.executable, "-m", "otspec", "audit", "tests.test_audit_hostile:closes_stderr",
                           "--samples", "2000"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "a sampler must not close or redirect the process's standard streams" in \
        proc.stderr, proc.stderr


def test_the_command_line_audit_in_a_child_process_prints_the_same_report_as_in_process(capsys):
    args = ["audit", TOKEN, "--samples", "600", "--vocab", "8", "--json"]
    proc = subprocess.run([sys.executable, "-m", "otspec", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    status, out, _ = cli(args, capsys)
    child, here = json.loads(proc.stdout), json.loads(out)
    assert child.pop("seconds") > 0 and here.pop("seconds") > 0  # the one field that is a timing
    assert proc.returncode == status == 0 and child == here


@pytest.mark.parametrize("body,match", [("def f(:\n", "SyntaxError (line 1)"), ("raise RuntimeError('x')\n",
                                                                                "RuntimeError: x"),
                                        ("import sys\nsys.exit(3)\n", "called sys.exit(3)")])
def test_a_sampler_module_that_cannot_be_imported_is_exit_2_with_one_line(body, match, tmp_path, monkeypatch, capsys):
    (tmp_path / "broken_sampler.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "broken_sampler", raising=False)
    status, _, err = cli(["audit", "broken_sampler:f", "--samples", "200"], capsys)
    assert status == 2 and len(err.strip().splitlines()) == 1 and "broken_sampler" in err, err
    assert match in err, err


def test_sizes_are_refused_before_allocating(capsys):
    P, L = 128, 2
    too_wide = MAX_POOL_ENTRIES // (P * (L + 1)) + 1
    status, _, err = cli(["audit", TOKEN, "--samples", "200", "--vocab", str(too_wide)], capsys)
    assert status == 2 and "MAX_POOL_ENTRIES" in err
    status, _, err = cli(["audit", TOKEN, "--samples", "200", "--vocab", "100000"], capsys)
    assert status == 2 and "MAX_POOL_ENTRIES" in err
    pool = synthetic_pool(vocab=too_wide - 1, draft_length=1, n_pairs=8)  # the peaked family: no V x V matrix
    assert pool.target.shape == (8, 2, too_wide - 1)
    with pytest.raises(ValueError, match="chunk"):
        audit(token, samples=200, chunk=0, progress=False)


def test_the_exact_audit_honours_or_refuses_every_option(tmp_path, capsys):
    base = ["audit", TOKEN, "--exact", "--samples", "200", "--vocab", "2", "--draft-length", "1"]
    status, _, err = cli([*base, "--rows", str(ROOT / "figures" / "llm_distilled_rows.npz")], capsys)
    assert status == 2 and "--rows" in err
    for alpha in ("0", "0.9", "nan"):
        status, _, err = cli([*base, "--alpha", alpha], capsys)
        assert status == 2 and "alpha" in err
    status, out, _ = cli([*base, "--alpha", "0.01", "--out", str(tmp_path), "--json"], capsys)
    report = json.loads(out)
    assert status == 0 and report["alpha"] == 0.01 and report["verdict"] == "no bias detected"
    assert json.loads((tmp_path / "audit.json").read_text())["alpha"] == 0.01
    assert "no bias detected" in (tmp_path / "audit.md").read_text()


def test_the_wrong_verifier_reads_as_such_not_as_biased(capsys):
    """A lossless token sampler audited as Gumbel verification: the law passes, the acceptance does not."""
    report = audit(token, samples=20_000, verifier="gumbel", progress=False)
    assert report.verdict == "not gumbel verification" and not report.biased and report.failed
    assert "acceptance (z)" in report.failed_tests
    assert not any(name.split(" ")[0] in audit_core.LAW_TESTS for name in report.failed_tests)
    status, out, _ = cli(["audit", TOKEN, "--samples", "20000", "--verifier", "gumbel"], capsys)
    assert status == 1 and "not gumbel verification" in out
    z = report.acceptance["z"]
    assert "acceptance (z): z = " in out and f"{z:.4g}" in out  # the test that fired, with its statistic
    status, out, _ = cli(["audit", "otspec.audit.catalogue:accept_all", "--samples", "2000"], capsys)
    assert status == 1 and "biased" in out and "first_token (G): G = " in out  # the summary names the test that fired
    assert "a lower bound on the token-level bias" in out


def test_a_long_audit_says_so_before_it_runs_on(monkeypatch, capsys):
    monkeypatch.setattr(audit_core, "NOTICE_AFTER_S", 0.0)
    audit(token, samples=12_000, progress=False)
    assert "more minutes at the first call's rate" in capsys.readouterr().err


def test_whole_number_floats_are_not_integers():
    with pytest.raises(SamplerError, match="dtype float64; the protocol needs integers"):
        audit(whole_floats, samples=200, progress=False)
    assert np.issubdtype(np.asarray(token(*_one_call())[0]).dtype, np.integer)


def _one_call():
    pool = synthetic_pool(n_pairs=2, vocab=4, draft_length=1)
    rng = np.random.default_rng(0)
    return np.zeros((2, 1), dtype=np.int64), pool.draft, pool.target, rng


def test_fifth_round_out_folders_base_exceptions_and_limit_names(tmp_path, capsys, monkeypatch):
    """--out is checked before the audit (an empty path used to write the card into the working folder, an unwritable
    one failed after the whole run); a sampler raising a BaseException is the sampler's error (exit 2, one line, not
    the 'biased' status 1); a limit is named once, by what it is."""
    from otspec.cli import main

    module = tmp_path / "hsx5.py"
    module.write_text("def base_exc(*a):\n    raise BaseException('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    for out, says in (("", "got an empty one"), ("/proc/x", "--out /proc/x")):
        with pytest.raises(SystemExit) if out == "" else contextlib.nullcontext():
            assert main(["audit", "otspec.audit.adapters:token", "--samples", "200", "--out", out]) == 2
        assert says in capsys.readouterr().err
    assert not (tmp_path / "audit.md").exists()
    assert main(["audit", "hsx5:base_exc", "--samples", "200"]) == 2
    err = capsys.readouterr().err
    assert "the sampler raised BaseException: boom" in err and "Traceback" not in err
    assert main(["audit", "otspec.audit.adapters:token", "--samples", "100000000000"]) == 2
    err = capsys.readouterr().err
    assert "above MAX_AUDIT_SAMPLES = 50,000,000" in err and "50,000,000 = 50,000,000" not in err


def test_fifth_round_the_timeout_covers_the_samplers_import(tmp_path, capsys, monkeypatch):
    """A module that hangs while it is imported is bounded by --timeout too (it ran forever)."""
    from otspec.cli import main

    (tmp_path / "hs_import_sleep.py").write_text("import time\ntime.sleep(60)\n\ndef f(*a):\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    start = time.perf_counter()
    assert main(["audit", "hs_import_sleep:f", "--timeout", "1", "--samples", "200"]) == 2
    assert time.perf_counter() - start < 10
    assert "took longer than the timeout (1 s)" in capsys.readouterr().err
