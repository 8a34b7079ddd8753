"""Option types shared by the commands: counts, seeds, finite numbers, the threads option."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def add_threads_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("--threads", type=count_of("threads"), default=None, metavar="N",
                         help="Use at most N CPU threads for the compute-heavy steps (default: the cores other "
                         "programs leave free; simple additions always use one).")


def count_of(noun: str, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type for a count of `noun` from 1 (to `maximum`): the number, or a usage error saying the range."""
    allowed = f" from 1 to {maximum}" if maximum is not None else ", 1 or more"

    def count(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            number = 0
        if number < 1 or (maximum is not None and number > maximum):
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of {noun}: give a whole number{allowed}.")
        return number

    return count


MAX_SEED = 2**64 - 1  # torch's generators take 64-bit seeds


def seed_value(text: str) -> int:
    """An argparse type for a random seed: a whole number from 0 to MAX_SEED, or a usage error saying so."""
    try:
        number = int(text)
    except ValueError:
        number = -1
    if not 0 <= number <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a seed: give a whole number from 0 to {MAX_SEED}.")
    return number


MAX_SEARCH_RESULTS = 1000  # ten pages of the Hub's answers; a narrower query finds a model faster than more rows


def finite_number(text: str) -> float:
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number: give one such as 1 or 0.5.")
    return number
