#!/usr/bin/env python3
"""Parses an OpenMetrics exposition from stdin with the Python prometheus_client parser (a
strict third-party parser) and prints its families as JSON: name, type, samples (name, labels,
value). A malformed exposition raises, and the test fails with the parser's message."""
import json
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families

families = [
    {
        "name": f.name,
        "type": f.type,
        "samples": [{"name": s.name, "labels": s.labels, "value": s.value} for s in f.samples],
    }
    for f in text_string_to_metric_families(sys.stdin.read())
]
json.dump(families, sys.stdout)
