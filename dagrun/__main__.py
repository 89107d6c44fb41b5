"""``python -m dagrun`` is the ``dagrun`` command."""

from dagrun.cli import program

program()
