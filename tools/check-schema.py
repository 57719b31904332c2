#!/usr/bin/env python3
"""Checks schemas/examples against schemas/login-event.v1.schema.json with Python's
jsonschema: valid-*.json must pass, invalid-*.json must fail (or not be JSON).
Exit 0 when every example agrees with its name, 1 otherwise, 3 when jsonschema is missing."""
import glob
import json
import os
import sys

try:
    import jsonschema
except ImportError:
    print("jsonschema is not installed (pip install jsonschema)", file=sys.stderr)
    sys.exit(3)

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "schemas")
schema = json.load(open(os.path.join(root, "login-event.v1.schema.json")))
jsonschema.Draft202012Validator.check_schema(schema)
validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
bad = 0
for path in sorted(glob.glob(os.path.join(root, "examples", "*.json"))):
    name = os.path.basename(path)
    try:
        ok = validator.is_valid(json.load(open(path, encoding="utf-8")))
    except ValueError:
        ok = False
    if ok != name.startswith("valid-"):
        bad += 1
        print(f"schema disagrees with example name: {name}")
sys.exit(1 if bad else 0)
