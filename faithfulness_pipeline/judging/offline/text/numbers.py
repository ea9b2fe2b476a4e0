"""Numbers: reading them from text, and whether a claimed number matches a stated one.

Digits (thousands separators, multipliers such as "million", 万, 억), English number words from two
upward, and Chinese numerals before a measure word; a round claimed number may approximate a stated
one. It reads lowercased text and a word list its caller already split, so it needs no other text
module: the claim side (``units``), the sentence index (``haystack``) and the rules share it.
"""

from __future__ import annotations

import re
from itertools import compress, repeat

# English number words are numbers, not content: "three euros" must match "€3".
WORD_NUMBERS = {
    "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30,
    "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100,
    "dozen": 12,
}

DIGIT_RE = re.compile(r"\d")

# Applied to lowercased text.
_NUMBER_RE = re.compile(r"(\d[\d,.]*)(?:\s*(thousand|million|billion|trillion|bn|万|萬|亿|億|천|만|억))?")
_PLAIN_NUMBER_RE = re.compile(r"\d[\d,.]*")
# The same numbers without their trailing commas and periods (which _parse_digits strips anyway).
_STRIPPED_NUMBER_RE = re.compile(r"\d(?:[\d,.]*\d)?")
_NOT_NUMBER = bytes(c for c in range(128) if not (chr(c).isdigit() or chr(c) in ",."))
_ASCII_NUMBER_RUNS = bytes.maketrans(_NOT_NUMBER, b" " * len(_NOT_NUMBER))
_THOUSANDS_RE = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_CJK_MULTIPLIER_RE = re.compile("[万萬亿億천만억]")
_MULTIPLIERS = {
    "thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12, "bn": 1e9,
    "万": 1e4, "萬": 1e4, "亿": 1e8, "億": 1e8, "천": 1e3, "만": 1e4, "억": 1e8,
}
_ZH_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "兩": 2, "三": 3, "四": 4, "五": 5,
              "六": 6, "七": 7, "八": 8, "九": 9}
_ZH_UNITS = {"十": 10, "百": 100, "千": 1000}
# A Chinese numeral counts only before a measure word: 一 alone mostly means "a"/"one".
_ZH_NUMBER_RE = re.compile(
    "([零〇一二两兩三四五六七八九十百千]+)(?=[个個人年月日号號岁歲次名位元块塊倍天周週条條种種家本只隻分秒点點])"
)


def numbers_of(lower: str, words: list[str], distinct: set[str] | None = None) -> list[float]:
    found = digit_values(lower)
    if not WORD_NUMBERS.keys().isdisjoint(words if distinct is None else distinct):
        values = list(map(WORD_NUMBERS.get, words))
        previous, last = 0, -2  # the value of the number word at ``last`` (0 once it is used up)
        for i in compress(range(len(values)), values):  # only the number words, found in C
            value = values[i]
            assert value is not None
            if i != last + 1:
                previous = 0
            if 20 <= previous <= 90 and value < 10:
                found[-1] = float(previous + value)  # twenty-five
                previous = 0
            else:
                found.append(float(value))
                previous = value
            last = i
    return found


def digit_values(lower: str) -> list[float]:
    """Numbers written in digits (thousands separators and multipliers such as "million", 万, 억
    applied); codes like "v2" count too, alike on both sides."""
    if has_multiplier(lower):
        return [value for value, _ in digit_numbers(lower)]
    if lower.isascii():
        # Runs of digits, commas and periods by one byte translation and a split, each stripped
        # of its leading and trailing commas and periods: what the pattern finds, without a scan
        # in the regex engine.
        runs = lower.encode("ascii").translate(_ASCII_NUMBER_RUNS).decode("ascii").split()
        tokens = list(filter(None, map(str.strip, runs, repeat(",."))))
    else:
        tokens = _STRIPPED_NUMBER_RE.findall(lower)
    return _token_values(tokens)


def _token_values(tokens: list[str]) -> list[float]:
    """The values of numbers as ``_STRIPPED_NUMBER_RE`` finds them."""
    plain = "".join(tokens)
    if plain.isdigit() and (len(plain) <= 30 or max(map(len, tokens)) <= 30):
        return list(map(float, tokens))  # only digit runs: what _parse_digits would make of each
    found: list[float] = []
    for tok in tokens:
        found.extend(_parse_digits(tok))
    return found


def has_multiplier(lower: str) -> bool:
    """Whether a multiplier word may follow a number (a superset: "bn" also matches "abnormal");
    without one, the plain number pattern finds exactly what ``_NUMBER_RE`` would."""
    if "thousand" in lower or "illion" in lower or "bn" in lower:
        return True
    return not lower.isascii() and _CJK_MULTIPLIER_RE.search(lower) is not None


def digit_numbers(lower: str) -> list[tuple[float, int]]:
    """Numbers written in digits, with their positions."""
    if not has_multiplier(lower):
        return [(value, m.start()) for m in _PLAIN_NUMBER_RE.finditer(lower) for value in _parse_digits(m.group())]
    found: list[tuple[float, int]] = []
    for m in _NUMBER_RE.finditer(lower):
        values = _parse_digits(m.group(1))
        if m.group(2) and len(values) == 1:
            values = [values[0] * _MULTIPLIERS[m.group(2)]]
        found.extend((value, m.start()) for value in values)
    return found


def _parse_digits(tok: str) -> list[float]:
    if tok.isdigit():
        return [float(tok)] if len(tok) <= 30 else []
    digits = tok.rstrip(",.")
    if len(digits) > 30:
        return []  # an identifier or a digit run, not a quantity (and no float overflow)
    if digits.count(".") > 1:
        digits = digits[: digits.index(".", digits.index(".") + 1)]  # "1.2.3" -> "1.2"
    if "," in digits and not _THOUSANDS_RE.fullmatch(digits):
        # "1,2,3" is a list, not one number
        return [float(x) for x in digits.split(",") if x and x.replace(".", "", 1).isdigit()]
    return [float(digits.replace(",", ""))]


def zh_numbers(text: str) -> list[float]:
    return [v for m in _ZH_NUMBER_RE.finditer(text) if (v := _zh_value(m.group(1))) is not None]


def _zh_value(run: str) -> float | None:
    if not any(ch in _ZH_UNITS for ch in run):
        digits = 0
        for ch in run:  # 二〇一七 -> 2017
            digits = digits * 10 + _ZH_DIGITS[ch]
        value = digits
    else:
        value, pending = 0, 0
        for ch in run:  # 二十三 -> 23, 十九 -> 19, 一百零五 -> 105
            if ch in _ZH_DIGITS:
                pending = _ZH_DIGITS[ch]
            else:
                value += (pending or 1) * _ZH_UNITS[ch]
                pending = 0
        value += pending
    return float(value) if value > 1 else None


def number_matches(claimed: float, stated: float) -> bool:
    """Equal, or a reasonable approximation: a round claimed number (at most two significant digits,
    100 or more, not a year) within 10 % of the stated one ("almost 7,000" for 6,850)."""
    if claimed == stated:
        return True
    return may_approximate(claimed) and abs(claimed - stated) <= 0.1 * stated


def may_approximate(claimed: float) -> bool:
    """Whether ``claimed`` is round enough to stand for a nearby number (see ``number_matches``):
    any other claimed number matches only itself, which a set lookup answers."""
    if claimed < 100 or (claimed == int(claimed) and 1000 <= claimed <= 2100):
        return False
    magnitude: int = 10 ** (len(str(int(claimed))) - 2)
    return claimed % magnitude == 0
