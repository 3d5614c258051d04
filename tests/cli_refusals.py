"""How the hostile-input rounds check a command's refusal: exit 2 and one line on stderr naming the input."""

from __future__ import annotations


def refused(main, argv, capsys, *needles) -> str:
    """``main(argv)``, a command's main, answers exit 2 with one line on stderr that holds every needle; that line."""
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's own refusals
        code = stop.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert all(n in err for n in needles), err
    return err
