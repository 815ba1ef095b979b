//! The API's OpenAPI 3.1 description: `docs/openapi.yaml`, compiled in and served as JSON at
//! `GET /api/v1/openapi.json`. Converted once at start (`to_json`), not per request.

use serde_json::Value;
use yaml_rust2::{Yaml, YamlLoader};

/// Where clients fetch the description (no API key needed).
pub const OPENAPI_PATH: &[u8] = b"/api/v1/openapi.json";

/// The description as written.
pub const OPENAPI_YAML: &str = include_str!("../../docs/openapi.yaml");

/// `docs/openapi.yaml` as JSON bytes. Panics if the compiled-in document is not valid YAML
/// (a unit test proves it is).
pub fn to_json() -> Vec<u8> {
    let docs = YamlLoader::load_from_str(OPENAPI_YAML).expect("docs/openapi.yaml is YAML");
    let doc = docs.into_iter().next().expect("one document");
    serde_json::to_vec(&value(doc)).expect("JSON")
}

fn value(y: Yaml) -> Value {
    match y {
        Yaml::Null | Yaml::BadValue | Yaml::Alias(_) => Value::Null,
        Yaml::Boolean(b) => Value::Bool(b),
        Yaml::Integer(i) => Value::from(i),
        Yaml::Real(r) => r.parse::<f64>().map_or(Value::String(r), Value::from),
        Yaml::String(s) => Value::String(s),
        Yaml::Array(a) => Value::Array(a.into_iter().map(value).collect()),
        Yaml::Hash(h) => Value::Object(
            h.into_iter()
                .map(|(k, v)| {
                    let key = match k {
                        Yaml::String(s) => s,
                        Yaml::Integer(i) => i.to_string(),
                        Yaml::Boolean(b) => b.to_string(),
                        other => format!("{other:?}"),
                    };
                    (key, value(v))
                })
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_converts_and_names_every_operation() {
        let v: Value = serde_json::from_slice(&to_json()).unwrap();
        assert_eq!(v["openapi"], "3.1.0");
        let paths = v["paths"].as_object().unwrap();
        let ops: Vec<String> = paths
            .values()
            .flat_map(|p| p.as_object().unwrap().values())
            .filter_map(|op| {
                op.get("operationId")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .collect();
        for id in [
            "listLinks",
            "createLink",
            "getLink",
            "patchLink",
            "deleteLink",
        ] {
            assert!(ops.iter().any(|o| o == id), "{id} missing from {ops:?}");
        }
        // Status codes stay strings (YAML quoted them), enum values stay numbers.
        assert!(v["paths"]["/api/v1/urls"]["post"]["responses"]["201"].is_object());
        assert_eq!(v["components"]["schemas"]["RedirectStatus"]["enum"][0], 301);
    }
}
