"""Bearer-token authentication and a small RBAC-like authorizer for the test API server.

Tokens come from a static token file in the API server's CSV format (`token,user,uid,"group1,group2"`).
The policy (YAML or JSON) grants rules to users and groups:

    users:
      viewer: [{verbs: [get, watch], apiGroups: ["*"], resources: ["*"], namespaces: ["*"]}]
    groups:
      system:masters: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"]}]

Members of system:masters may do everything. With no token file every request is the user "admin" in
system:masters; with no policy every authenticated user may do everything. Instances are replaced, never
mutated, so request threads read them without locking.
"""

import csv

import yaml

from . import errors

MASTERS = "system:masters"


class User:
    __slots__ = ("name", "groups")

    def __init__(self, name, groups):
        self.name = name
        self.groups = list(groups)


ANONYMOUS_ADMIN = User("admin", [MASTERS, "system:authenticated"])


class TokenAuthenticator:
    def __init__(self, tokens=None):
        self.tokens = tokens  # None disables authentication

    @classmethod
    def from_file(cls, path):
        tokens = {}
        with open(path, newline="") as fh:
            for lineno, row in enumerate(csv.reader(fh), 1):
                if not row or row[0].startswith("#"):
                    continue
                if len(row) < 2 or not row[0] or not row[1]:
                    raise ValueError("%s:%d: expected token,user[,uid[,\"group1,group2\"]]" % (path, lineno))
                groups = [g.strip() for g in row[3].split(",") if g.strip()] if len(row) > 3 else []
                tokens[row[0].strip()] = User(row[1].strip(), groups + ["system:authenticated"])
        return cls(tokens)

    def authenticate(self, authorization_header):
        if self.tokens is None:
            return ANONYMOUS_ADMIN
        header = authorization_header or ""
        if not header.startswith("Bearer "):
            raise errors.unauthorized()
        user = self.tokens.get(header[len("Bearer "):].strip())
        if user is None:
            raise errors.unauthorized()
        return user


def _matches(values, wanted):
    return "*" in values or wanted in values


class Policy:
    def __init__(self, spec):
        if not isinstance(spec, dict):
            raise ValueError("an RBAC policy must be a mapping with 'users' and/or 'groups'")
        unknown = set(spec) - {"users", "groups"}
        if unknown:
            raise ValueError("unknown RBAC policy keys: %s" % ", ".join(sorted(unknown)))
        self.users = self._rules(spec.get("users") or {}, "users")
        self.groups = self._rules(spec.get("groups") or {}, "groups")

    @staticmethod
    def _rules(mapping, where):
        if not isinstance(mapping, dict):
            raise ValueError("%s must map names to rule lists" % where)
        out = {}
        for name, rules in mapping.items():
            if not isinstance(rules, list):
                raise ValueError("%s.%s must be a list of rules" % (where, name))
            for i, rule in enumerate(rules):
                if not isinstance(rule, dict) or not rule.get("verbs") or not rule.get("resources"):
                    raise ValueError("%s.%s[%d] needs verbs and resources" % (where, name, i))
            out[name] = rules
        return out

    @classmethod
    def from_file(cls, path):
        with open(path) as fh:
            return cls(yaml.safe_load(fh) or {})

    def allows(self, user, verb, group, resource, namespace, name):
        if MASTERS in user.groups:
            return True
        rules = list(self.users.get(user.name, []))
        for g in user.groups:
            rules.extend(self.groups.get(g, []))
        for rule in rules:
            if not _matches(rule.get("verbs", []), verb):
                continue
            if not _matches(rule.get("apiGroups", ["*"]), group):
                continue
            resources = rule.get("resources", [])
            base = resource.split("/")[0]
            if not (_matches(resources, resource) or (base + "/*") in resources):
                continue
            if namespace and rule.get("namespaces") and not _matches(rule["namespaces"], namespace):
                continue
            if rule.get("resourceNames") and name not in rule["resourceNames"]:
                continue
            return True
        return False


def forbidden(user, verb, group, resource, subresource, namespace, name):
    full = resource + ("/" + subresource if subresource else "")
    qualified = errors.qualified_resource(group, resource)
    scope = 'in the namespace "%s"' % namespace if namespace else "at the cluster scope"
    reason = 'User "%s" cannot %s resource "%s" in API group "%s" %s' % (user.name, verb, full, group, scope)
    if name:
        message = '%s "%s" is forbidden: %s' % (qualified, name, reason)
    else:
        message = "%s is forbidden: %s" % (qualified, reason)
    return errors.forbidden_request(message, group, resource, name)
