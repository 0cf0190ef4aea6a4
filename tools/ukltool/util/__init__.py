"""Helpers every job uses: errors, paths, subprocesses, the console, locks, report files."""
