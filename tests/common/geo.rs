//! A MaxMind-format country database built for tests (no free one ships with the OS).

/// Writes a country database to `path` mapping each network of `nets` to its ISO code.
pub fn test_mmdb(path: &std::path::Path, nets: &[(&str, &'static str)]) {
    #[derive(serde::Serialize)]
    struct Country {
        iso_code: &'static str,
    }
    #[derive(serde::Serialize)]
    struct Record {
        country: Country,
    }
    let mut w = mmdb_writer::Writer::new("Test-Country");
    for &(net, iso_code) in nets {
        let net: ipnet::IpNet = net.parse().unwrap();
        w.insert(
            net,
            &Record {
                country: Country { iso_code },
            },
        )
        .unwrap();
    }
    std::fs::write(path, w.to_bytes().unwrap()).unwrap();
}
