"""Label and field selectors: parsing (with Kubernetes' syntax) and matching against objects.

Pure functions; parsed selectors are immutable and may be shared between threads.
"""

import re

from . import errors

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def label_key_error(key):
    """Why a label key is invalid, or None."""
    prefix, sep, name = key.rpartition("/")
    if sep and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        return ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                "with an alphanumeric character")
    return None


def label_value_error(value):
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        return ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                "and must start and end with an alphanumeric character")
    return None


class Requirement:
    __slots__ = ("key", "op", "values")

    def __init__(self, key, op, values):
        self.key = key
        self.op = op
        self.values = values

    def matches(self, labels):
        present = self.key in labels
        if self.op in ("=", "==", "in"):
            return present and labels[self.key] in self.values
        if self.op in ("!=", "notin"):
            return not present or labels[self.key] not in self.values
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in (">", "<"):
            if not present:
                return False
            try:
                have = int(labels[self.key])
            except ValueError:
                return False
            want = int(next(iter(self.values)))
            return have > want if self.op == ">" else have < want
        return False


class LabelSelector:
    """A parsed label selector; an empty selector matches everything."""

    def __init__(self, requirements):
        self.requirements = requirements

    def empty(self):
        return not self.requirements

    def matches(self, labels):
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def equality_pairs(self):
        """(key, value) pairs an object must carry; used to narrow candidates through an index."""
        return [(r.key, next(iter(r.values))) for r in self.requirements
                if r.op in ("=", "==") or (r.op == "in" and len(r.values) == 1)]


_TOKEN = re.compile(r"\s*(!=|==|=|\(|\)|,|!|>|<|[^\s!=(),<>]+)")


def parse_label_selector(text):
    """Parses `a=b,c!=d,e in (x,y),f notin (z),g,!h,i>3`; raises a 400 ApiError when malformed."""
    if text is None or not text.strip():
        return LabelSelector([])
    tokens = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            if text[pos:].strip() == "":
                break
            raise errors.bad_request("unable to parse requirement: unexpected character at offset %d in %r"
                                     % (pos, text))
        tokens.append(m.group(1))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    reqs = []
    i = 0

    def fail(detail):
        raise errors.bad_request("unable to parse requirement: %s (in label selector %r)" % (detail, text))

    def check_key(key):
        problem = label_key_error(key)
        if problem:
            fail("key: Invalid value: %s: %s" % (errors.go_quote(key), problem))

    def check_value(value):
        problem = label_value_error(value)
        if problem:
            fail("values[0][%s]: Invalid value: %s: %s" % (key, errors.go_quote(value), problem))

    while i < len(tokens):
        tok = tokens[i]
        if tok == "!":
            if i + 1 >= len(tokens):
                fail("missing key after '!'")
            key = tokens[i + 1]
            check_key(key)
            reqs.append(Requirement(key, "!", frozenset()))
            i += 2
        else:
            key = tok
            if key in ("=", "==", "!=", "(", ")", ",", ">", "<"):
                fail("found '%s', expected: identifier" % key)
            check_key(key)
            i += 1
            if i >= len(tokens) or tokens[i] == ",":
                reqs.append(Requirement(key, "exists", frozenset()))
            else:
                op = tokens[i]
                i += 1
                if op in ("=", "==", "!="):
                    value = ""
                    if i < len(tokens) and tokens[i] != ",":
                        value = tokens[i]
                        i += 1
                    check_value(value)
                    reqs.append(Requirement(key, op, frozenset([value])))
                elif op in (">", "<"):
                    if i >= len(tokens):
                        fail("missing value after '%s'" % op)
                    value = tokens[i]
                    i += 1
                    try:
                        int(value)
                    except ValueError:
                        fail("for 'Gt', 'Lt' operators, the value must be an integer")
                    reqs.append(Requirement(key, op, frozenset([value])))
                elif op in ("in", "notin"):
                    if i >= len(tokens) or tokens[i] != "(":
                        fail("found '%s', expected: '('" % (tokens[i] if i < len(tokens) else "end of string"))
                    i += 1
                    values = []
                    expect_value = True
                    while i < len(tokens) and tokens[i] != ")":
                        if tokens[i] == ",":
                            if expect_value:
                                values.append("")
                            expect_value = True
                        else:
                            check_value(tokens[i])
                            values.append(tokens[i])
                            expect_value = False
                        i += 1
                    if i >= len(tokens):
                        fail("found 'end of string', expected: ')'")
                    i += 1
                    if op == "in" and not values:
                        fail("for 'in', 'notin' operators, values set can't be empty")
                    reqs.append(Requirement(key, op, frozenset(values)))
                else:
                    fail("found '%s', expected: in, notin, =, ==, !=, gt, lt" % op)
        if i < len(tokens):
            if tokens[i] != ",":
                fail("found '%s', expected: ','" % tokens[i])
            i += 1
    return LabelSelector(reqs)


def selector_from_label_selector_object(sel):
    """Converts a metav1.LabelSelector ({matchLabels, matchExpressions}) into a LabelSelector."""
    reqs = []
    for key, value in sorted((sel or {}).get("matchLabels", {}).items()):
        reqs.append(Requirement(key, "=", frozenset([value])))
    for expr in (sel or {}).get("matchExpressions", []) or []:
        op = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}.get(expr.get("operator"))
        if op is None:
            raise ValueError("unsupported label selector operator %r" % expr.get("operator"))
        reqs.append(Requirement(expr.get("key", ""), op, frozenset(expr.get("values") or [])))
    return LabelSelector(reqs)


class FieldTerm:
    __slots__ = ("field", "op", "value")

    def __init__(self, field, op, value):
        self.field = field
        self.op = op
        self.value = value


class FieldSelector:
    def __init__(self, terms):
        self.terms = terms

    def empty(self):
        return not self.terms

    def matches(self, obj, getter):
        for term in self.terms:
            have = getter(obj, term.field)
            if have is None:
                have = ""
            if (have == term.value) != (term.op != "!="):
                return False
        return True

    def required_value(self, field):
        """The value an `=` term demands for field, or None."""
        for term in self.terms:
            if term.field == field and term.op != "!=":
                return term.value
        return None


def _split_unescaped(text, sep):
    parts, current, escaped = [], [], False
    for ch in text:
        if escaped:
            current.append(ch)
            escaped = False
        elif ch == "\\":
            current.append(ch)
            escaped = True
        elif ch == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def _unescape(value):
    return re.sub(r"\\(.)", r"\1", value)


def parse_field_selector(text, supported, unsupported_message):
    """Parses `f1=v1,f2!=v2`; `supported` is the set of field labels the resource answers.

    `unsupported_message(field)` builds the 400 message for an unknown field label."""
    if text is None or not text.strip():
        return FieldSelector([])
    terms = []
    for part in _split_unescaped(text, ","):
        part = part.strip()
        if not part:
            continue
        m = re.match(r"^([^=!]+?)\s*(==|!=|=)\s*(.*)$", part)
        if not m:
            raise errors.bad_request("invalid field selector: %s" % errors.go_quote(part))
        field, op, value = m.group(1).strip(), m.group(2), _unescape(m.group(3))
        if field not in supported:
            raise errors.bad_request(unsupported_message(field))
        terms.append(FieldTerm(field, op, value))
    return FieldSelector(terms)
