"""Schemathesis hooks for the positive run (tests/schemathesis.rs).

Some of the API's rules cannot be written in JSON Schema: a `long_url` must be a valid IRI with
a host the WHATWG parser accepts, and an `expires_at` must be in the future. Random strings
almost never satisfy them, so the positive run would never create a link and its stateful
phase would never reach GET, PATCH and DELETE. This hook keeps every other generated value and
replaces only those two with values the rules accept. The negative run uses no hooks.
"""
import itertools

import schemathesis

_n = itertools.count()


@schemathesis.hook
def map_body(context, body):
    if not isinstance(body, dict):
        return body
    n = next(_n)
    # Every create needs one, and a patch of nulls only is an empty patch (422).
    body["long_url"] = "https://example.com/st/%d" % n
    if isinstance(body.get("expires_at"), str):
        body["expires_at"] = None
    alias = body.get("custom_alias")
    if isinstance(alias, str):
        # Reserved words (api, healthz, ...) are refused and a repeated alias is taken: a
        # unique suffix keeps it valid and free.
        body["custom_alias"] = ("%s-%d" % (alias, n))[-64:].lstrip("-") or str(n)
    return body
