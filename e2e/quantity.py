"""Kubernetes resource quantities ("500m", "2", "1Gi", "1e3"): syntax check and conversion to numbers.

Shared by the test API server (which rejects malformed quantities like the real one) and the process node
(which schedules by CPU and memory). Pure functions.
"""

import re
from decimal import Decimal, InvalidOperation

QUANTITY_PATTERN = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_QUANTITY = re.compile(QUANTITY_PATTERN)
_BINARY = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1), "k": Decimal(10 ** 3),
            "M": Decimal(10 ** 6), "G": Decimal(10 ** 9), "T": Decimal(10 ** 12), "P": Decimal(10 ** 15),
            "E": Decimal(10 ** 18)}


class QuantityError(ValueError):
    pass


def parse(text):
    """The quantity as a Decimal; raises QuantityError with the API server's message when malformed."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return Decimal(str(text))
    if not isinstance(text, str):
        raise QuantityError("quantities must match the regular expression '%s'" % QUANTITY_PATTERN)
    m = _QUANTITY.match(text.strip())
    if not m:
        raise QuantityError("quantities must match the regular expression '%s'" % QUANTITY_PATTERN)
    number, suffix = m.group(1), m.group(2)
    try:
        value = Decimal(number)
    except InvalidOperation as exc:
        raise QuantityError("unable to parse quantity's suffix") from exc
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    if suffix in _DECIMAL:
        return value * _DECIMAL[suffix]
    em = re.match(r"^[eE]([-+]?[0-9]+)$", suffix)
    if em:
        return value * (Decimal(10) ** int(em.group(1)))
    raise QuantityError("unable to parse quantity's suffix")


def cpu_millis(text):
    return int(parse(text) * 1000)


def as_int(text):
    return int(parse(text))
