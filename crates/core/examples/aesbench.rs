fn main() {
    let keys = sheaf_core::Keys::from_passphrase(b"p".to_vec()).unwrap().with_argon2(64, 1, 1).unwrap();
    let (_, c) = keys.seal(keys.fresh_kdf().unwrap()).unwrap();
    let mut buf = vec![7u8; 1 << 20];
    let t = std::time::Instant::now();
    for i in 0..2000u64 {
        c.seal(0, i, b"aad", &mut buf);
    }
    let s = t.elapsed().as_secs_f64();
    println!("seal: {:.0} MiB/s", 2000.0 / s);
    let t = std::time::Instant::now();
    for _ in 0..2000u64 {
        std::hint::black_box(crc32c::crc32c(&buf));
    }
    println!("crc32c: {:.0} MiB/s", 2000.0 / t.elapsed().as_secs_f64());
}
