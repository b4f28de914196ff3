"""A subset of the Common Expression Language for CRD `x-kubernetes-validations` rules.

`compile_rule(text, schema)` parses a rule and checks it statically against the OpenAPI schema of the node it
is attached to (unknown identifiers, functions, fields of closed objects, obviously mistyped operands); any
construct outside the subset raises CelCompileError so a CRD is never silently left unvalidated.
`Program.evaluate(self_value, old_self)` runs it. Supported: literals (int, double, string, bool, null,
lists, maps), `self`/`oldSelf`, field selection and indexing, `has()`, `size()`, `in`, the operators
`! - * / % + < <= > >= == != && || ?:`, the macros all/exists/exists_one/map/filter, the string functions
contains/startsWith/endsWith/matches/lowerAscii/upperAscii/trim/split/join/indexOf/lastIndexOf/substring/replace,
list functions isSorted/sum/min/max/indexOf/lastIndexOf, and int()/uint()/double()/string()/bool()/dyn().
Programs are immutable and may be evaluated from several threads.
"""

import re


class CelCompileError(Exception):
    """A rule that does not compile. `pos` is the offset cel-go reports the error at (None: no location);
    `detail()` renders it as the API server does (ERROR: <input>:line:column: ... with the source line and a
    caret), prefixed with "compilation failed: " unless it is the rule's result type that is wrong."""

    def __init__(self, message, pos=None, compilation=True):
        super().__init__(message)
        self.message = message
        self.pos = pos
        self.compilation = compilation
        self.text = None  # the expression, filled in by compile_expression

    def detail(self):
        if not self.compilation:
            return self.message
        if self.pos is None or self.text is None:
            return "compilation failed: ERROR: <input>: %s" % self.message
        return "compilation failed: " + display_error(self.text, self.pos, self.message)

    def __str__(self):
        return self.detail()


def display_error(text, pos, message):
    """cel-go's Error.ToDisplayString: location, message, the source line and a caret under the column."""
    line_start = text.rfind("\n", 0, pos) + 1
    line_no = text.count("\n", 0, pos) + 1
    column = pos - line_start
    line_end = text.find("\n", pos)
    snippet = text[line_start:line_end if line_end >= 0 else len(text)].replace("\t", " ")
    indicator = "".join("\uff0e" if len(ch.encode("utf-8")) > 1 else "." for ch in snippet[:column])
    under = snippet[column:column + 1]
    indicator += "\uff3e" if under and len(under.encode("utf-8")) > 1 else "^"
    return "ERROR: <input>:%d:%d: %s\n | %s\n | %s" % (line_no, column + 1, message, snippet, indicator)


# What cel-go's ANTLR parser says it expected where an operand was missing.
_EXPECTING_OPERAND = ("{'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, "
                      "STRING, BYTES, IDENTIFIER}")


def _syntax(pos, message):
    return CelCompileError("Syntax error: " + message, pos)


def _token_text(tok):
    if tok.kind == "eof":
        return "<EOF>"
    if tok.kind == "string":
        return repr(tok.value)
    if tok.kind == "bool":
        return "true" if tok.value else "false"
    if tok.kind == "null":
        return "null"
    return str(tok.value)


class CelError(Exception):
    """A runtime evaluation error (no such key, no such overload, division by zero...)."""


# ---------------------------------------------------------------------------------------------- lexer

_PUNCT = ["||", "&&", "==", "!=", "<=", ">=", "<", ">", "!", "+", "-", "*", "/", "%", "?", ":", ".", ",", "[", "]",
          "(", ")", "{", "}"]
_RESERVED = {"as", "break", "const", "continue", "else", "for", "function", "if", "import", "let", "loop",
             "package", "namespace", "return", "var", "void", "while"}
_NUMBER = re.compile(r"0[xX][0-9a-fA-F]+[uU]?|\d+\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+[uU]?")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b", "f": "\f",
            "v": "\v", "?": "?", "`": "`"}


class Token:
    __slots__ = ("kind", "value", "pos")

    def __init__(self, kind, value, pos):
        self.kind = kind
        self.value = value
        self.pos = pos


def _lex(text):
    tokens = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        start = i
        raw = False
        if ch in "rRbB" and i + 1 < n and text[i + 1] in "'\"":
            if ch in "bB":
                raise _syntax(start, "bytes literals are not supported")
            raw = True
            i += 1
            ch = text[i]
        if ch in "'\"":
            quote = text[i:i + 3] if text[i:i + 3] in ("'''", '"""') else ch
            i += len(quote)
            out = []
            while True:
                if i >= n:
                    raise _syntax(start, "token recognition error at: '%s'" % text[start:])
                if text.startswith(quote, i):
                    i += len(quote)
                    break
                c = text[i]
                if c == "\n" and len(quote) == 1:
                    raise _syntax(start, "token recognition error at: '%s'" % text[start:i])
                if c == "\\" and not raw:
                    if i + 1 >= n:
                        raise _syntax(i, "token recognition error at: '%s'" % text[start:])
                    e = text[i + 1]
                    if e in _ESCAPES:
                        out.append(_ESCAPES[e])
                        i += 2
                    elif e == "u" and i + 6 <= n:
                        out.append(chr(int(text[i + 2:i + 6], 16)))
                        i += 6
                    elif e == "U" and i + 10 <= n:
                        out.append(chr(int(text[i + 2:i + 10], 16)))
                        i += 10
                    elif e == "x" and i + 4 <= n:
                        out.append(chr(int(text[i + 2:i + 4], 16)))
                        i += 4
                    else:
                        raise _syntax(i, "token recognition error at: '%s'" % text[start:i + 2])
                    continue
                out.append(c)
                i += 1
            tokens.append(Token("string", "".join(out), start))
            continue
        m = _NUMBER.match(text, i)
        if m and ch.isdigit():
            lit = m.group(0)
            i = m.end()
            if lit[-1] in "uU":
                lit = lit[:-1]
            if lit.lower().startswith("0x"):
                tokens.append(Token("int", int(lit, 16), start))
            elif any(c in lit for c in ".eE"):
                tokens.append(Token("double", float(lit), start))
            else:
                tokens.append(Token("int", int(lit), start))
            continue
        m = _IDENT.match(text, i)
        if m:
            word = m.group(0)
            i = m.end()
            if word in ("true", "false"):
                tokens.append(Token("bool", word == "true", start))
            elif word == "null":
                tokens.append(Token("null", None, start))
            elif word == "in":
                tokens.append(Token("op", "in", start))
            elif word in _RESERVED:
                raise CelCompileError("reserved identifier: %s" % word, start)
            else:
                tokens.append(Token("ident", word, start))
            continue
        for p in _PUNCT:
            if text.startswith(p, i):
                tokens.append(Token("op", p, start))
                i += len(p)
                break
        else:
            raise _syntax(start, "token recognition error at: '%s'" % ch)
    tokens.append(Token("eof", None, n))
    return tokens


# --------------------------------------------------------------------------------------------- parser
# AST nodes are tuples: (kind, ...).

_MACROS = {"all": 2, "exists": 2, "exists_one": 2, "map": (2, 3), "filter": 2}


class _Parser:
    def __init__(self, text):
        self.text = text
        self.tokens = _lex(text)
        self.pos = 0

    def peek(self):
        return self.tokens[self.pos]

    def take(self):
        tok = self.tokens[self.pos]
        self.pos += 1
        return tok

    def accept(self, value):
        tok = self.peek()
        if tok.kind == "op" and tok.value == value:
            self.pos += 1
            return tok
        return None

    def expect(self, value):
        tok = self.peek()
        if not self.accept(value):
            raise _syntax(tok.pos, "mismatched input '%s' expecting '%s'" % (_token_text(tok), value))

    def parse(self):
        node = self.expr()
        tok = self.peek()
        if tok.kind != "eof":
            raise _syntax(tok.pos, "extraneous input '%s' expecting <EOF>" % _token_text(tok))
        return node

    def expr(self):
        cond = self.or_expr()
        op = self.accept("?")
        if op:
            then = self.or_expr()
            self.expect(":")
            other = self.expr()
            return ("cond", cond, then, other, op.pos)
        return cond

    def or_expr(self):
        node = self.and_expr()
        while True:
            op = self.accept("||")
            if not op:
                return node
            node = ("or", node, self.and_expr(), op.pos)

    def and_expr(self):
        node = self.relation()
        while True:
            op = self.accept("&&")
            if not op:
                return node
            node = ("and", node, self.relation(), op.pos)

    def relation(self):
        node = self.addition()
        while True:
            tok = self.peek()
            if tok.kind == "op" and tok.value in ("<", "<=", ">", ">=", "==", "!=", "in"):
                self.take()
                node = ("binary", tok.value, node, self.addition(), tok.pos)
            else:
                return node

    def addition(self):
        node = self.multiplication()
        while True:
            tok = self.peek()
            if tok.kind == "op" and tok.value in ("+", "-"):
                self.take()
                node = ("binary", tok.value, node, self.multiplication(), tok.pos)
            else:
                return node

    def multiplication(self):
        node = self.unary()
        while True:
            tok = self.peek()
            if tok.kind == "op" and tok.value in ("*", "/", "%"):
                self.take()
                node = ("binary", tok.value, node, self.unary(), tok.pos)
            else:
                return node

    def unary(self):
        tok = self.peek()
        if tok.kind == "op" and tok.value == "!":
            self.take()
            return ("not", self.unary(), tok.pos)
        if tok.kind == "op" and tok.value == "-":
            self.take()
            nxt = self.peek()
            if nxt.kind in ("int", "double"):
                self.take()
                return self.member(("lit", -nxt.value))
            return ("neg", self.unary(), tok.pos)
        return self.member(self.primary())

    def args(self):
        out = []
        if self.accept(")"):
            return out
        while True:
            out.append(self.expr())
            if self.accept(")"):
                return out
            self.expect(",")

    def member(self, node):
        while True:
            dot = self.accept(".")
            if dot:
                tok = self.take()
                if tok.kind != "ident":
                    raise _syntax(tok.pos, "mismatched input '%s' expecting IDENTIFIER" % _token_text(tok))
                paren = self.accept("(")
                if paren:
                    node = self.call(tok.value, node, self.args(), paren.pos)
                else:
                    node = ("select", node, tok.value, dot.pos)
                continue
            bracket = self.accept("[")
            if bracket:
                index = self.expr()
                self.expect("]")
                node = ("index", node, index, bracket.pos)
            else:
                return node

    def call(self, name, target, args, pos):
        if target is not None and name in _MACROS:
            arity = _MACROS[name]
            arities = arity if isinstance(arity, tuple) else (arity,)
            if len(args) not in arities:
                raise CelCompileError("no matching overload for '%s' applied to %d arguments" % (name, len(args)),
                                      pos)
            if args[0][0] != "ident":
                raise CelCompileError("argument must be a simple name", pos)
            return ("macro", name, target, args[0][1], args[1:], pos)
        return ("call", name, target, args, pos)

    def primary(self):
        tok = self.take()
        if tok.kind in ("int", "double", "string", "bool", "null"):
            return ("lit", tok.value)
        if tok.kind == "ident":
            paren = self.accept("(")
            if paren:
                args = self.args()
                if tok.value == "has":
                    if len(args) != 1 or args[0][0] != "select":
                        raise CelCompileError("invalid argument to has() macro", paren.pos)
                    return ("has", args[0][1], args[0][2], paren.pos)
                return self.call(tok.value, None, args, paren.pos)
            return ("ident", tok.value, tok.pos)
        if tok.kind == "op" and tok.value == "(":
            node = self.expr()
            self.expect(")")
            return node
        if tok.kind == "op" and tok.value == "[":
            items = []
            if not self.accept("]"):
                while True:
                    items.append(self.expr())
                    if self.accept("]"):
                        break
                    self.expect(",")
            return ("list", items)
        if tok.kind == "op" and tok.value == "{":
            entries = []
            if not self.accept("}"):
                while True:
                    key = self.expr()
                    self.expect(":")
                    entries.append((key, self.expr()))
                    if self.accept("}"):
                        break
                    self.expect(",")
            return ("map", entries)
        if tok.kind == "op" and tok.value == ".":
            raise CelCompileError("qualified identifiers with a leading '.' are not supported", tok.pos)
        raise _syntax(tok.pos, "mismatched input '%s' expecting %s" % (_token_text(tok), _EXPECTING_OPERAND))


# --------------------------------------------------------------------------------------- static checks
# A static type is one of: "int", "double", "string", "bool", "null", "list", "map", "dyn", or a schema dict
# (an object whose fields are known).

_FUNCTIONS = {
    # name: (allowed receiver types or None for global, allowed arg counts, result type)
    "size": ({"string", "list", "map", "dyn", None}, (0, 1), "int"),
    "contains": ({"string", "dyn"}, (1,), "bool"),
    "startsWith": ({"string", "dyn"}, (1,), "bool"),
    "endsWith": ({"string", "dyn"}, (1,), "bool"),
    "matches": ({"string", "dyn", None}, (1, 2), "bool"),
    "lowerAscii": ({"string", "dyn"}, (0,), "string"),
    "upperAscii": ({"string", "dyn"}, (0,), "string"),
    "trim": ({"string", "dyn"}, (0,), "string"),
    "split": ({"string", "dyn"}, (1, 2), "list"),
    "join": ({"list", "dyn"}, (0, 1), "string"),
    "replace": ({"string", "dyn"}, (2, 3), "string"),
    "substring": ({"string", "dyn"}, (1, 2), "string"),
    "indexOf": ({"string", "list", "dyn"}, (1, 2), "int"),
    "lastIndexOf": ({"string", "list", "dyn"}, (1, 2), "int"),
    "isSorted": ({"list", "dyn"}, (0,), "bool"),
    "sum": ({"list", "dyn"}, (0,), "dyn"),
    "min": ({"list", "dyn"}, (0,), "dyn"),
    "max": ({"list", "dyn"}, (0,), "dyn"),
    "int": ({None}, (1,), "int"),
    "uint": ({None}, (1,), "int"),
    "double": ({None}, (1,), "double"),
    "string": ({None}, (1,), "string"),
    "bool": ({None}, (1,), "bool"),
    "dyn": ({None}, (1,), "dyn"),
}


def _schema_type(schema):
    if not isinstance(schema, dict):
        return "dyn"
    if schema.get("x-kubernetes-int-or-string") or schema.get("x-kubernetes-preserve-unknown-fields"):
        if not schema.get("properties"):
            return "dyn"
    typ = schema.get("type")
    if typ == "integer":
        return "int"
    if typ == "number":
        return "double"
    if typ == "string":
        return "string"
    if typ == "boolean":
        return "bool"
    if typ == "array":
        return ("list", schema.get("items") or {})
    if typ == "object":
        if schema.get("properties") is not None:
            return schema
        if isinstance(schema.get("additionalProperties"), dict):
            return ("mapof", schema["additionalProperties"])
        return "map"
    return "dyn"


def _simple(t):
    if isinstance(t, dict):
        return "map"
    if isinstance(t, tuple):
        return "list" if t[0] == "list" else "map"
    return t


class _Checker:
    def __init__(self, text, self_schema, has_old):
        self.text = text
        self.self_type = _schema_type(self_schema)
        self.has_old = has_old
        self.uses_old = False

    def fail(self, pos, message):
        raise CelCompileError(message, pos)

    def check(self, node, scope):
        kind = node[0]
        if kind == "lit":
            v = node[1]
            if v is None:
                return "null"
            if isinstance(v, bool):
                return "bool"
            if isinstance(v, int):
                return "int"
            if isinstance(v, float):
                return "double"
            return "string"
        if kind == "ident":
            name = node[1]
            if name in scope:
                return scope[name]
            if name == "self":
                return self.self_type
            if name == "oldSelf":
                self.uses_old = True
                return self.self_type
            self.fail(node[2], "undeclared reference to '%s' (in container '')" % name)
        if kind == "select":
            return self.select_type(self.check(node[1], scope), node[2], node[3])
        if kind == "has":
            operand = self.check(node[1], scope)
            self.select_type(operand, node[2], node[3])
            return "bool"
        if kind == "index":
            base = self.check(node[1], scope)
            self.check(node[2], scope)
            if isinstance(base, tuple):
                return _schema_type(base[1])
            return "dyn"
        if kind in ("list", "map"):
            if kind == "list":
                for item in node[1]:
                    self.check(item, scope)
                return "list"
            for k, v in node[1]:
                self.check(k, scope)
                self.check(v, scope)
            return "map"
        if kind == "not":
            self.expect_bool(self.check(node[1], scope), "!_", node[2])
            return "bool"
        if kind == "neg":
            t = _simple(self.check(node[1], scope))
            if t not in ("int", "double", "dyn"):
                self.fail(node[2], "found no matching overload for '-_' applied to '(%s)'" % t)
            return t
        if kind in ("and", "or"):
            self.expect_bool(self.check(node[1], scope), "_&&_" if kind == "and" else "_||_", node[3])
            self.expect_bool(self.check(node[2], scope), "_&&_" if kind == "and" else "_||_", node[3])
            return "bool"
        if kind == "cond":
            self.expect_bool(self.check(node[1], scope), "_?_:_", node[4])
            a = self.check(node[2], scope)
            b = self.check(node[3], scope)
            return a if _simple(a) == _simple(b) else "dyn"
        if kind == "binary":
            return self.binary(node, scope)
        if kind == "macro":
            _, name, target, var, rest, pos = node
            target_type = self.check(target, scope)
            simple = _simple(target_type)
            if simple not in ("list", "map", "dyn"):
                self.fail(pos, "expression of type '%s' cannot be range of a comprehension (must be list, map, or "
                               "dynamic)" % simple)
            elem = "dyn"
            if isinstance(target_type, tuple):
                elem = _schema_type(target_type[1]) if target_type[0] == "list" else "string"
            elif isinstance(target_type, dict):
                elem = "string"
            inner = dict(scope)
            inner[var] = elem
            results = [self.check(expr, inner) for expr in rest]
            if name in ("all", "exists", "exists_one", "filter"):
                self.expect_bool(results[0], name, pos)
            if name == "map" and len(rest) == 2:
                self.expect_bool(results[0], name, pos)
            if name in ("all", "exists", "exists_one"):
                return "bool"
            return "list"
        if kind == "call":
            _, name, target, args, pos = node
            if name not in _FUNCTIONS:
                self.fail(pos, "undeclared reference to '%s' (in container '')" % name)
            receivers, arities, result = _FUNCTIONS[name]
            target_type = None if target is None else _simple(self.check(target, scope))
            nargs = len(args)
            if target is None:
                allowed = None in receivers
                if name == "size":
                    arities = (1,)
            else:
                allowed = target_type in receivers or (
                    target_type == "dyn" and any(r is not None for r in receivers))
                if name == "size":
                    arities = (0,)
            if not allowed:
                self.fail(pos, "found no matching overload for '%s' applied to '%s'"
                          % (name, target_type or "global"))
            if nargs not in arities:
                self.fail(pos, "found no matching overload for '%s' applied to %d arguments" % (name, nargs))
            for arg in args:
                self.check(arg, scope)
            if name in ("indexOf", "lastIndexOf", "size"):
                return "int"
            if name in ("min", "max", "sum") and isinstance(target, tuple):
                return "dyn"
            return result
        self.fail(0, "unsupported expression")

    def expect_bool(self, t, op, pos):
        if _simple(t) not in ("bool", "dyn"):
            self.fail(pos, "found no matching overload for '%s' applied to '(%s)'" % (op, _simple(t)))

    def select_type(self, base, field, pos):
        if isinstance(base, dict):
            props = base.get("properties") or {}
            if field in props:
                return _schema_type(props[field])
            if base.get("x-kubernetes-preserve-unknown-fields"):
                return "dyn"
            self.fail(pos, "undefined field '%s'" % field)
        if isinstance(base, tuple):
            if base[0] == "mapof":
                return _schema_type(base[1])
            self.fail(pos, "type 'list' does not support field selection")
        if base in ("int", "double", "string", "bool", "null"):
            self.fail(pos, "type '%s' does not support field selection" % base)
        return "dyn"

    def binary(self, node, scope):
        _, op, left, right, pos = node
        a = _simple(self.check(left, scope))
        b = _simple(self.check(right, scope))
        known = a != "dyn" and b != "dyn"
        numeric = {"int", "double"}
        if op == "in":
            if b not in ("list", "map", "dyn"):
                self.fail(pos, "found no matching overload for '@in' applied to '(%s, %s)'" % (a, b))
            return "bool"
        if op in ("==", "!="):
            if known and a != b and not (a in numeric and b in numeric) and "null" not in (a, b):
                self.fail(pos, "found no matching overload for '_%s_' applied to '(%s, %s)'" % (op, a, b))
            return "bool"
        if op in ("<", "<=", ">", ">="):
            if known and a != b and not (a in numeric and b in numeric):
                self.fail(pos, "found no matching overload for '_%s_' applied to '(%s, %s)'" % (op, a, b))
            if known and a in ("map", "null"):
                self.fail(pos, "found no matching overload for '_%s_' applied to '(%s, %s)'" % (op, a, b))
            return "bool"
        # arithmetic
        if op == "+":
            if known and a != b:
                self.fail(pos, "found no matching overload for '_+_' applied to '(%s, %s)'" % (a, b))
            if known and a in ("bool", "map", "null"):
                self.fail(pos, "found no matching overload for '_+_' applied to '(%s, %s)'" % (a, b))
            return a if a != "dyn" else b
        if known and (a != b or a not in numeric):
            self.fail(pos, "found no matching overload for '_%s_' applied to '(%s, %s)'" % (op, a, b))
        return a if a != "dyn" else b


# ----------------------------------------------------------------------------------------- evaluation


def _is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _type_name(v):
    if v is None:
        return "null_type"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "double"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "list"
    if isinstance(v, dict):
        return "map"
    return type(v).__name__


def _no_overload(op, *values):
    return CelError("no such overload: %s(%s)" % (op, ", ".join(_type_name(v) for v in values)))


def _equal(a, b):
    if _is_num(a) and _is_num(b):
        return a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return a == b


def _compare(op, a, b):
    ok = (_is_num(a) and _is_num(b)) or (type(a) is type(b) and isinstance(a, (str, bool)))
    if not ok:
        raise _no_overload(op, a, b)
    if op == "<":
        return a < b
    if op == "<=":
        return a <= b
    if op == ">":
        return a > b
    return a >= b


def _truncate_div(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


class _Evaluator:
    def __init__(self, activation):
        self.activation = activation

    def eval(self, node, scope):
        kind = node[0]
        if kind == "lit":
            return node[1]
        if kind == "ident":
            name = node[1]
            if name in scope:
                return _checked(scope[name])
            if name in self.activation:
                return _checked(self.activation[name])
            raise CelError("undeclared reference to '%s'" % name)
        if kind == "select":
            base = self.eval(node[1], scope)
            if not isinstance(base, dict):
                raise CelError("no such key: %s" % node[2])
            if node[2] not in base:
                raise CelError("no such key: %s" % node[2])
            return _checked(base[node[2]])
        if kind == "has":
            base = self.eval(node[1], scope)
            if not isinstance(base, dict):
                raise CelError("invalid type for field selection.")
            return node[2] in base
        if kind == "index":
            base = self.eval(node[1], scope)
            index = self.eval(node[2], scope)
            if isinstance(base, list):
                if not _is_num(index) or int(index) != index:
                    raise _no_overload("_[_]", base, index)
                i = int(index)
                if i < 0 or i >= len(base):
                    raise CelError("index '%d' out of range in list size '%d'" % (i, len(base)))
                return _checked(base[i])
            if isinstance(base, dict):
                if index not in base:
                    raise CelError("no such key: %s" % (index,))
                return _checked(base[index])
            raise _no_overload("_[_]", base, index)
        if kind == "list":
            return [self.eval(item, scope) for item in node[1]]
        if kind == "map":
            return {self.eval(k, scope): self.eval(v, scope) for k, v in node[1]}
        if kind == "not":
            v = self.eval(node[1], scope)
            if not isinstance(v, bool):
                raise _no_overload("!_", v)
            return not v
        if kind == "neg":
            v = self.eval(node[1], scope)
            if not _is_num(v):
                raise _no_overload("-_", v)
            return -v
        if kind in ("and", "or"):
            return self.logical(kind, node[1], node[2], scope)
        if kind == "cond":
            c = self.eval(node[1], scope)
            if not isinstance(c, bool):
                raise _no_overload("_?_:_", c)
            return self.eval(node[2] if c else node[3], scope)
        if kind == "binary":
            return self.binary(node[1], self.eval(node[2], scope), self.eval(node[3], scope))
        if kind == "macro":
            return self.macro(node, scope)
        if kind == "call":
            return self.call(node, scope)
        raise CelError("unsupported expression")

    def logical(self, kind, left, right, scope):
        # CEL's && and || are commutative with respect to errors.
        short = kind == "or"
        error = None
        try:
            a = self.eval(left, scope)
            if not isinstance(a, bool):
                raise _no_overload("_||_" if short else "_&&_", a)
            if a is short:
                return short
        except CelError as exc:
            error = exc
        b = self.eval(right, scope)
        if not isinstance(b, bool):
            raise _no_overload("_||_" if short else "_&&_", b)
        if b is short:
            return short
        if error is not None:
            raise error
        return not short

    def binary(self, op, a, b):
        if op == "==":
            return _equal(a, b)
        if op == "!=":
            return not _equal(a, b)
        if op in ("<", "<=", ">", ">="):
            return _compare(op, a, b)
        if op == "in":
            if isinstance(b, list):
                return any(_equal(a, x) for x in b)
            if isinstance(b, dict):
                return a in b
            raise _no_overload("@in", a, b)
        if op == "+":
            if isinstance(a, str) and isinstance(b, str):
                return a + b
            if isinstance(a, list) and isinstance(b, list):
                return a + b
            if _is_num(a) and _is_num(b) and type(a) is type(b):
                return a + b
            raise _no_overload("_+_", a, b)
        if not (_is_num(a) and _is_num(b) and type(a) is type(b)):
            raise _no_overload("_%s_" % op, a, b)
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            if b == 0:
                raise CelError("division by zero")
            return _truncate_div(a, b) if isinstance(a, int) else a / b
        if op == "%":
            if b == 0:
                raise CelError("modulus by zero")
            if isinstance(a, float):
                raise _no_overload("_%_", a, b)
            return a - _truncate_div(a, b) * b
        raise CelError("unknown operator %s" % op)

    def macro(self, node, scope):
        _, name, target, var, rest = node[:5]
        collection = self.eval(target, scope)
        if isinstance(collection, dict):
            items = list(collection.keys())
        elif isinstance(collection, list):
            items = collection
        else:
            raise _no_overload(name, collection)
        inner = dict(scope)

        def run(expr, item):
            inner[var] = item
            return self.eval(expr, inner)

        def predicate(item):
            v = run(rest[0], item)
            if not isinstance(v, bool):
                raise _no_overload(name, v)
            return v

        if name == "all":
            error = None
            for item in items:
                try:
                    if not predicate(item):
                        return False
                except CelError as exc:
                    error = exc
            if error:
                raise error
            return True
        if name == "exists":
            error = None
            for item in items:
                try:
                    if predicate(item):
                        return True
                except CelError as exc:
                    error = exc
            if error:
                raise error
            return False
        if name == "exists_one":
            return sum(1 for item in items if predicate(item)) == 1
        if name == "filter":
            return [item for item in items if predicate(item)]
        if len(rest) == 2:
            return [run(rest[1], item) for item in items if predicate(item)]
        return [run(rest[0], item) for item in items]

    def call(self, node, scope):
        _, name, target, arg_nodes, _pos = node
        args = [self.eval(a, scope) for a in arg_nodes]
        if target is None:
            if name == "size":
                return _size(args[0])
            if name == "matches":
                return _matches(args[0], args[1])
            return _convert(name, args[0])
        recv = self.eval(target, scope)
        return _method(name, recv, args)


def _size(v):
    if isinstance(v, (str, list, dict)):
        return len(v)
    raise _no_overload("size", v)


def _matches(text, pattern):
    if not isinstance(text, str) or not isinstance(pattern, str):
        raise _no_overload("matches", text, pattern)
    try:
        return re.search(pattern, text) is not None
    except re.error as exc:
        raise CelError("invalid regular expression %r: %s" % (pattern, exc)) from exc


def _convert(name, v):
    try:
        if name in ("int", "uint"):
            if isinstance(v, bool):
                raise _no_overload(name, v)
            if isinstance(v, float):
                return int(v)
            if isinstance(v, str):
                return int(v, 10)
            if isinstance(v, int):
                if name == "uint" and v < 0:
                    raise CelError("uint out of range")
                return v
        elif name == "double":
            if _is_num(v):
                return float(v)
            if isinstance(v, str):
                return float(v)
        elif name == "string":
            if isinstance(v, str):
                return v
            if isinstance(v, bool):
                return "true" if v else "false"
            if _is_num(v):
                return repr(v) if isinstance(v, float) else str(v)
        elif name == "bool":
            if isinstance(v, bool):
                return v
            if v in ("true", "True", "TRUE", "t", "1"):
                return True
            if v in ("false", "False", "FALSE", "f", "0"):
                return False
        elif name == "dyn":
            return v
    except ValueError as exc:
        raise CelError("type conversion error from '%s' to '%s'" % (_type_name(v), name)) from exc
    raise _no_overload(name, v)


def _method(name, recv, args):
    if name == "size" and not args:
        return _size(recv)
    if isinstance(recv, str):
        if name == "contains":
            return args[0] in recv
        if name == "startsWith":
            return recv.startswith(args[0])
        if name == "endsWith":
            return recv.endswith(args[0])
        if name == "matches":
            return _matches(recv, args[0])
        if name == "lowerAscii":
            return "".join(c.lower() if c.isascii() else c for c in recv)
        if name == "upperAscii":
            return "".join(c.upper() if c.isascii() else c for c in recv)
        if name == "trim":
            return recv.strip()
        if name == "split":
            parts = recv.split(args[0]) if args[0] else list(recv)
            if len(args) == 2:
                limit = args[1]
                if limit == 0:
                    return []
                if limit > 0 and len(parts) > limit:
                    parts = parts[:limit - 1] + [args[0].join(parts[limit - 1:])]
            return parts
        if name == "replace":
            return recv.replace(args[0], args[1], args[2] if len(args) == 3 else -1)
        if name == "substring":
            end = args[1] if len(args) == 2 else len(recv)
            if args[0] < 0 or end > len(recv) or args[0] > end:
                raise CelError("index out of range")
            return recv[args[0]:end]
        if name == "indexOf":
            return recv.find(args[0], args[1] if len(args) == 2 else 0)
        if name == "lastIndexOf":
            return recv.rfind(args[0]) if len(args) == 1 else recv.rfind(args[0], 0, args[1] + len(args[0]))
    if isinstance(recv, list):
        if name == "join":
            if not all(isinstance(x, str) for x in recv):
                raise _no_overload("join", recv)
            return (args[0] if args else "").join(recv)
        if name == "isSorted":
            return all(_compare("<=", a, b) for a, b in zip(recv, recv[1:]))
        if name == "sum":
            total = 0
            for x in recv:
                if not _is_num(x):
                    raise _no_overload("sum", x)
                total += x
            return total
        if name in ("min", "max"):
            if not recv:
                raise CelError("%s called on empty list" % name)
            best = recv[0]
            for x in recv[1:]:
                if _compare("<" if name == "min" else ">", x, best):
                    best = x
            return best
        if name == "indexOf":
            return next((i for i, x in enumerate(recv) if _equal(x, args[0])), -1)
        if name == "lastIndexOf":
            return next((i for i in range(len(recv) - 1, -1, -1) if _equal(recv[i], args[0])), -1)
    raise _no_overload(name, recv, *args)


class InvalidData:
    """A value CEL cannot take as its schema's type (a JSON float in an integer field): using it in a rule is an
    error, as in Kubernetes, which converts fields lazily (`invalid data, expected int, got float64`)."""

    __slots__ = ("message",)

    def __init__(self, message):
        self.message = message


def _checked(value):
    if isinstance(value, InvalidData):
        raise CelError(value.message)
    return value


def typed_value(value, schema):
    """Converts a JSON value for CEL using its schema: `number` fields become doubles."""
    if not isinstance(schema, dict):
        return value
    typ = schema.get("type")
    if typ == "number" and _is_num(value):
        return float(value)
    if typ == "integer" and isinstance(value, float) and not schema.get("x-kubernetes-int-or-string"):
        return InvalidData("invalid data, expected int, got float64")
    if typ == "object" and isinstance(value, dict):
        props = schema.get("properties") or {}
        addl = schema.get("additionalProperties") if isinstance(schema.get("additionalProperties"), dict) else None
        return {k: typed_value(v, props.get(k, addl)) for k, v in value.items()}
    if typ == "array" and isinstance(value, list):
        items = schema.get("items") or {}
        return [typed_value(v, items) for v in value]
    return value


class Program:
    """A compiled rule; evaluate() returns the rule's value or raises CelError."""

    def __init__(self, text, ast, uses_old_self):
        self.text = text
        self.ast = ast
        self.uses_old_self = uses_old_self

    def evaluate(self, self_value, old_self=None):
        activation = {"self": self_value}
        if self.uses_old_self:
            activation["oldSelf"] = old_self
        return _Evaluator(activation).eval(self.ast, {})


def compile_expression(text, schema, result_type="bool"):
    """Parses and checks an expression against the schema of `self`; raises CelCompileError."""
    if not isinstance(text, str) or not text.strip():
        raise CelCompileError("rule is not specified", compilation=False)
    try:
        ast = _Parser(text).parse()
        checker = _Checker(text, schema, True)
        result = _simple(checker.check(ast, {}))
    except CelCompileError as exc:
        exc.text = text
        raise
    except RecursionError as exc:
        raise CelCompileError("expression nests too deeply", compilation=False) from exc
    if result_type and result not in (result_type, "dyn"):
        raise CelCompileError("cel expression must evaluate to a %s" % result_type, compilation=False)
    return Program(text, ast, checker.uses_old)


def compile_rule(text, schema):
    return compile_expression(text, schema, "bool")
