//! Gzips the console's assets (`src/http/console/`, all but the page) into `OUT_DIR`, so the binary holds and serves them compressed.
use std::io::Write;

fn main() {
    let dir = "src/http/console";
    println!("cargo:rerun-if-changed={dir}");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    for entry in std::fs::read_dir(dir).expect("the console's folder") {
        let path = entry.expect("a folder entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a UTF-8 name")
            .to_owned();
        if name == "index.html" {
            continue;
        }
        let data = std::fs::read(&path).expect("an asset");
        // flate2's header has no name and a zero mtime: the same input gives the same bytes.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&data).expect("gzip in memory");
        let gz = gz.finish().expect("gzip in memory");
        std::fs::write(format!("{out}/{name}.gz"), gz).expect("write to OUT_DIR");
    }
}
