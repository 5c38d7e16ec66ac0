#!/usr/bin/env python3
"""schema/tollgate.schema.json against the loader, through the real binary.

- every tollgate config in examples/ validates against the schema and passes check-config;
- good/*.yaml: configs covering many fields at once, accepted by both;
- bad/*.yaml: refused by both. The first line of each is `# FIELD.PATH: what is wrong`, and
  check-config's error must name FIELD.PATH (`# (root): ...` for errors of the whole file);
- divergent/*.yaml: the cases where the schema and check-config disagree today, each with its
  first line `# divergent schema=accept|refuse check-config=accept|refuse: why`. Both verdicts
  are checked as written, so a loader change that ends a divergence fails here: move the file to
  good/ or bad/ then;
- pending/*.yaml: valid configs with fields the loader does not have yet. The schema must
  accept them; check-config too, once the binary knows the field (until then the test is
  skipped, naming it);
- every field the loader reads (OnlyKeys lists, node["field"] in src/config) is in the schema.

YAML is read as the loader reads it (yaml-cpp plus config/yaml.cpp): booleans are `true` and
`false` only, integers plain decimals, and there are no timestamps (`2026-12-31` is a string).

Python 3 standard library plus python3-jsonschema and python3-yaml (scripts/install-deps.sh).
Run: python3 tests/config_schema/test_schema.py --binary build/tollgate -v
"""
import atexit
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import jsonschema
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SCHEMA_PATH = os.path.join(ROOT, "schema", "tollgate.schema.json")

# Set by main() from --binary.
BINARY = os.environ.get("TOLLGATE_BINARY", "")

# Fields in the schema that the loader does not read yet (being added); anything else in the
# schema that the loader does not know is an error of the schema.
PENDING_FIELDS = set()


class ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader with the scalar types of the tollgate loader."""


ConfigLoader.yaml_implicit_resolvers = {}
for _tag, _regexp, _first in [
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:bool", r"^(?:true|false)$", ["t", "f"]),
    ("tag:yaml.org,2002:int", r"^-?[0-9]+$", list("-0123456789")),
    ("tag:yaml.org,2002:float",
     r"^-?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$", list("-.0123456789")),
]:
    ConfigLoader.add_implicit_resolver(_tag, re.compile(_regexp), _first)


def load_yaml(path):
    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=ConfigLoader)


def first_line(path):
    with open(path, encoding="utf-8") as f:
        return f.readline().rstrip("\n")


def rel(path):
    return os.path.relpath(path, ROOT)


def corpus(name):
    return sorted(glob.glob(os.path.join(HERE, name, "*.yaml")))


# What good/secrets-from-env.yaml reads from the environment and a file.
SECRETS_DIR = tempfile.mkdtemp(prefix="tollgate-schema-secrets-")
atexit.register(shutil.rmtree, SECRETS_DIR, True)
with open(os.path.join(SECRETS_DIR, "tollgate-postgres-url"), "w") as secret:
    secret.write("postgres://tollgate:pw@127.0.0.1:5432/tollgate\n")
SECRET_ENV = dict(os.environ, TOLLGATE_SECRETS_DIR=SECRETS_DIR,
                  TOLLGATE_REDIS_URL="redis-cluster://127.0.0.1:7000,127.0.0.1:7001")


def check_config(path):
    return subprocess.run([BINARY, "check-config", path], capture_output=True, text=True,
                          timeout=30, env=SECRET_ENV)


class SchemaTestCase(unittest.TestCase):
    validator = None

    @classmethod
    def setUpClass(cls):
        with open(SCHEMA_PATH, encoding="utf-8") as f:
            schema = json.load(f)
        jsonschema.Draft202012Validator.check_schema(schema)
        SchemaTestCase.schema = schema
        SchemaTestCase.validator = jsonschema.Draft202012Validator(schema)

    def schema_errors(self, doc):
        """The schema's complaints about `doc`, most relevant first, as readable lines."""
        errors = sorted(self.validator.iter_errors(doc), key=jsonschema.exceptions.relevance)
        out = []
        for e in errors:
            best = jsonschema.exceptions.best_match([e])
            out.append("%s: %s" % (best.json_path, best.message))
        return out

    def assertBothAccept(self, path):
        errors = self.schema_errors(load_yaml(path))
        self.assertEqual(errors, [], "%s: refused by the schema" % rel(path))
        r = check_config(path)
        self.assertEqual(r.returncode, 0, "%s: refused by check-config: %s" % (rel(path), r.stderr))


class SchemaFileTests(SchemaTestCase):

    def test_the_schema_is_draft_2020_12(self):
        self.assertEqual(self.schema["$schema"], "https://json-schema.org/draft/2020-12/schema")

    def test_every_field_the_loader_reads_is_in_the_schema(self):
        sources = ["loader.cpp", "keys.cpp", "limits.cpp", "routes.cpp", "tls.cpp", "upstreams.cpp"]
        loader_fields = set()
        for name in sources:
            with open(os.path.join(ROOT, "src", "config", name), encoding="utf-8") as f:
                text = f.read()
            # OnlyKeys(node, path, {"a", "b", ...}), kLimitFields = {...}, allowed.insert("x"),
            # ParseLimit(..., {"scope", "plans"}) and node["field"].
            for block in re.findall(r"OnlyKeys\([^{;]*\{([^}]*)\}", text, re.S):
                loader_fields.update(re.findall(r'"([a-z0-9_]+)"', block))
            for block in re.findall(r"kLimitFields\s*=\s*\{([^}]*)\}", text, re.S):
                loader_fields.update(re.findall(r'"([a-z0-9_]+)"', block))
            loader_fields.update(re.findall(r'allowed\.insert\("([a-z0-9_]+)"\)', text))
            for block in re.findall(r"ParseLimit\([^;]*?\{([^}]*)\}\)", text, re.S):
                loader_fields.update(re.findall(r'"([a-z0-9_]+)"', block))
            loader_fields.update(re.findall(r'\w\["([a-z0-9_]+)"\]', text))
        self.assertIn("refill_per_hour", loader_fields)  # the scan works

        schema_fields = set()

        def walk(node):
            if isinstance(node, dict):
                if isinstance(node.get("properties"), dict):
                    schema_fields.update(node["properties"])
                for v in node.values():
                    walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)
        walk(self.schema)
        self.assertEqual(sorted(loader_fields - schema_fields), [],
                         "fields the loader reads that the schema does not have")
        self.assertLessEqual(schema_fields - loader_fields, PENDING_FIELDS,
                             "fields in the schema that the loader does not read")
        landed = PENDING_FIELDS & loader_fields
        if landed:
            print("\nnote: pending fields now in the loader: %s (move their pending/ files "
                  "to good/, and drop them from PENDING_FIELDS)" % sorted(landed),
                  file=sys.stderr)


class ExampleTests(SchemaTestCase):
    """examples/*.yaml and *.yml that are tollgate configs (not Envoy's, Traefik's or nginx's;
    examples/ratelimit/ holds envoyproxy/ratelimit descriptor files, not configs)."""

    def test_every_example_config_is_valid(self):
        sections = set(self.schema["properties"])
        found = []
        for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*.yaml")) +
                           glob.glob(os.path.join(ROOT, "examples", "*.yml"))):
            doc = load_yaml(path)
            keys = set(doc) if isinstance(doc, dict) else set()
            if not keys & sections:
                continue  # another program's file
            with self.subTest(example=rel(path)):
                self.assertLessEqual(keys, sections,
                                     "%s: looks like a tollgate config with unknown sections"
                                     % rel(path))
                self.assertBothAccept(path)
            found.append(rel(path))
        self.assertIn("examples/tollgate.yaml", found)


class CorpusTests(SchemaTestCase):

    def test_good_configs_pass_both(self):
        files = corpus("good")
        self.assertGreaterEqual(len(files), 3)
        for path in files:
            with self.subTest(config=rel(path)):
                self.assertBothAccept(path)

    def test_a_keys_file_is_a_key_list(self):
        keys_list = {"$schema": self.schema["$schema"], "$defs": self.schema["$defs"],
                     "$ref": "#/$defs/keyList"}
        validator = jsonschema.Draft202012Validator(keys_list)
        for path in sorted(glob.glob(os.path.join(HERE, "good", "data", "keys*.yaml"))):
            with self.subTest(keys_file=rel(path)):
                self.assertEqual([e.message for e in validator.iter_errors(load_yaml(path))], [])

    def test_bad_configs_are_refused_by_both(self):
        files = corpus("bad")
        self.assertGreaterEqual(len(files), 25)
        for path in files:
            with self.subTest(config=rel(path)):
                line = first_line(path)
                m = re.match(r"^# (\(root\)|[A-Za-z0-9_.\[\]-]+): \S", line)
                self.assertIsNotNone(m, "%s: the first line must be `# FIELD.PATH: what is "
                                        "wrong`, got %r" % (rel(path), line))
                field = m.group(1)
                errors = list(self.validator.iter_errors(load_yaml(path)))
                self.assertNotEqual(errors, [],
                                    "%s: accepted by the schema (%s)" % (rel(path), line))
                if field != "(root)":
                    # Every complaint is about FIELD: at it, above it or below it (not a
                    # mistake elsewhere in the file).
                    target = "$." + field
                    for e in errors:
                        where = e.json_path
                        self.assertTrue(target.startswith(where) or where.startswith(target),
                                        "%s: the schema refuses %s, not %s: %s"
                                        % (rel(path), where, target, e.message))
                r = check_config(path)
                self.assertEqual(r.returncode, 1, "%s: check-config did not refuse it (%s): %s"
                                 % (rel(path), line, r.stdout + r.stderr))
                self.assertTrue(r.stderr.startswith(path + ": "), r.stderr)
                if field == "(root)":
                    continue
                # A field being added is refused as unknown until the binary has it.
                unknown = re.match(re.escape(path) + r": ([A-Za-z0-9_.]+): unknown field$",
                                   r.stderr.strip())
                if (unknown and unknown.group(1).split(".")[-1] in PENDING_FIELDS and
                        field.startswith(unknown.group(1))):
                    continue
                self.assertIn(field, r.stderr,
                                  "%s: check-config refused it for another reason" % rel(path))

    def test_divergences_are_as_documented(self):
        files = corpus("divergent")
        for path in files:
            with self.subTest(config=rel(path)):
                line = first_line(path)
                m = re.match(r"^# divergent schema=(accept|refuse) check-config=(accept|refuse): "
                             r"\S", line)
                self.assertIsNotNone(m, "%s: bad first line %r" % (rel(path), line))
                self.assertNotEqual(m.group(1), m.group(2), line)
                schema_accepts = not self.schema_errors(load_yaml(path))
                r = check_config(path)
                gone = ("%s: this divergence is gone (schema %s, check-config %s): move the "
                        "file to good/ or bad/" % (rel(path), schema_accepts and "accepts" or
                                                   "refuses", r.returncode == 0 and "accepts"
                                                   or "refuses"))
                self.assertEqual(schema_accepts, m.group(1) == "accept", gone)
                self.assertEqual(r.returncode, 0 if m.group(2) == "accept" else 1,
                                 gone + ": " + r.stderr)

    def test_pending_fields(self):
        files = corpus("pending")
        waiting = []
        for path in files:
            with self.subTest(config=rel(path)):
                self.assertEqual(self.schema_errors(load_yaml(path)), [],
                                 "%s: refused by the schema" % rel(path))
                r = check_config(path)
                if r.returncode == 1 and "unknown field" in r.stderr:
                    waiting.append(r.stderr.strip())
                    continue
                self.assertEqual(r.returncode, 0, "%s: %s" % (rel(path), r.stderr))
        if waiting:
            self.skipTest("not in the binary yet: " + "; ".join(waiting))


def main():
    """--binary names the tollgate executable; the rest goes to unittest (a class or test
    name, -v)."""
    import argparse
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--binary", default=os.environ.get("TOLLGATE_BINARY", ""))
    args, rest = ap.parse_known_args()
    if not args.binary or not os.access(args.binary, os.X_OK):
        sys.exit("%s: --binary must name the tollgate executable (got %r)"
                 % (os.path.basename(__file__), args.binary))
    global BINARY
    BINARY = os.path.abspath(args.binary)
    unittest.main(argv=[sys.argv[0]] + rest)


if __name__ == "__main__":
    main()
