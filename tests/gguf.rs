//! The GGUF loader: oracle files read exactly as gguf-py reads them, every truncation and
//! header corruption an error (never a panic), and the writer round-trips every value type.

mod common;

use hrx::gguf::{GgufErrorKind, GgufFile, GgufWriter, Value, ValueType};
use hrx::quant::DType;
use std::path::Path;
use std::process::Command;
use tinyjson::JsonValue;

fn hrx_json(args: &[&str]) -> JsonValue {
    let out = Command::new(env!("CARGO_BIN_EXE_hrx")).args(args).output().expect("run hrx");
    assert!(out.status.success(), "hrx {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf8").parse().expect("hrx printed JSON")
}

fn num(v: &JsonValue) -> f64 {
    *v.get::<f64>().expect("number")
}

#[test]
fn inspect_lists_exactly_the_tensors_gguf_py_reads() {
    let Some(oracle) = common::oracle() else { return };
    for path in common::oracle_ggufs(&oracle) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let reference =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gguf").join(format!("{name}.tensors.json"));
        let reference: JsonValue = std::fs::read_to_string(&reference)
            .unwrap_or_else(|e| panic!("{}: {e} (run scripts/gen_gguf_tensor_lists.py)", reference.display()))
            .parse()
            .expect("reference JSON");
        let ours = hrx_json(&["inspect", "--json", path.to_str().unwrap()]);

        let ref_tensors: &Vec<JsonValue> = reference["tensors"].get().unwrap();
        let our_tensors: &Vec<JsonValue> = ours["tensors"].get().unwrap();
        assert_eq!(our_tensors.len(), ref_tensors.len(), "{name}: tensor count");
        for (o, r) in our_tensors.iter().zip(ref_tensors) {
            let label = format!("{name}: {:?}", r["name"]);
            for key in ["name", "dtype"] {
                assert_eq!(o[key].get::<String>(), r[key].get::<String>(), "{label}: {key}");
            }
            for key in ["offset", "bytes"] {
                assert_eq!(num(&o[key]), num(&r[key]), "{label}: {key}");
            }
            let shape = |v: &JsonValue| v.get::<Vec<JsonValue>>().unwrap().iter().map(num).collect::<Vec<_>>();
            assert_eq!(shape(&o["shape"]), shape(&r["shape"]), "{label}: shape");
        }
        let our_keys: Vec<&String> =
            ours["metadata"].get::<std::collections::HashMap<String, JsonValue>>().unwrap().keys().collect();
        let ref_keys: Vec<&String> = reference["metadata_keys"]
            .get::<Vec<JsonValue>>()
            .unwrap()
            .iter()
            .map(|k| k.get::<String>().unwrap())
            .collect();
        assert_eq!(our_keys.len(), ref_keys.len(), "{name}: metadata key count");
        for k in ref_keys {
            assert!(our_keys.contains(&k), "{name}: key {k} missing");
        }
    }
}

/// Parses bytes; returns the error text, or None if it parsed. A panic fails the test.
fn parse_error(bytes: Vec<u8>) -> Option<String> {
    GgufFile::from_bytes("probe.gguf", bytes).err().map(|e| e.to_string())
}

fn assert_names_place(msg: &str) {
    assert!(msg.starts_with("probe.gguf: byte "), "error does not name file and offset: {msg}");
}

#[test]
fn every_truncation_of_an_oracle_file_is_a_clear_error() {
    let Some(oracle) = common::oracle() else { return };
    for path in common::oracle_ggufs(&oracle) {
        let bytes = std::fs::read(&path).unwrap();
        let file = GgufFile::open(&path).expect("oracle file opens");
        let end_of_data = file.tensors().iter().map(|t| t.file_offset + t.n_bytes).max().unwrap() as usize;
        assert_eq!(end_of_data, bytes.len(), "{}: data ends at the end of the file", path.display());
        // Every prefix through the first 4 KiB of the header, then a sample across the rest
        // (header and data), including the last byte.
        let mut lengths: Vec<usize> = (0..4096.min(bytes.len())).collect();
        let step = (bytes.len() / 120).max(1);
        lengths.extend((4096..bytes.len()).step_by(step));
        lengths.push(bytes.len() - 1);
        for len in lengths {
            let msg = parse_error(bytes[..len].to_vec())
                .unwrap_or_else(|| panic!("{}: prefix of {len} bytes parsed", path.display()));
            assert_names_place(&msg);
        }
    }
}

#[test]
fn every_header_byte_corrupted_never_panics() {
    let Some(oracle) = common::oracle() else { return };
    let path = oracle.join("models/tiny/mmproj-qwen3vl-tiny-F16.gguf");
    let bytes = std::fs::read(&path).unwrap();
    let header_len = GgufFile::open(&path).unwrap().data_offset() as usize;
    let mut errors = 0;
    for pos in 0..header_len {
        for poison in [0x00u8, 0xff, 0x80, 0x7f] {
            if bytes[pos] == poison {
                continue;
            }
            let mut bad = bytes.clone();
            bad[pos] = poison;
            if let Some(msg) = parse_error(bad) {
                assert_names_place(&msg);
                errors += 1;
            }
        }
    }
    // Most header bytes are structural (lengths, counts, types, shapes): corrupting them must
    // be caught, not silently accepted.
    assert!(errors > header_len, "only {errors} corruptions of {header_len} header bytes were caught");
}

/// A small file whose layout the tests know: magic, version, counts, one key, one tensor.
fn small_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("test".into()));
    w.add_tensor("t", DType::F32, &[4, 2], vec![0u8; 32]).unwrap();
    w.to_bytes()
}

// Byte offsets inside small_file(): key "general.architecture" is 20 bytes.
const N_TENSORS_AT: usize = 8;
const N_KV_AT: usize = 16;
const KEY_LEN_AT: usize = 24;
const VALUE_TYPE_AT: usize = 32 + 20;
const TENSOR_INFO_AT: usize = VALUE_TYPE_AT + 4 + 8 + 4;
const N_DIMS_AT: usize = TENSOR_INFO_AT + 8 + 1;
const DTYPE_AT: usize = N_DIMS_AT + 4 + 16;
const OFFSET_AT: usize = DTYPE_AT + 4;

fn with(bytes: &[u8], at: usize, value: &[u8]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    b[at..at + value.len()].copy_from_slice(value);
    b
}

fn kind_of(bytes: Vec<u8>) -> GgufErrorKind {
    GgufFile::from_bytes("probe.gguf", bytes).err().expect("should fail").kind
}

#[test]
fn header_fields_corrupted_give_the_matching_error() {
    let good = small_file();
    let f = GgufFile::from_bytes("probe.gguf", good.clone()).expect("small file parses");
    assert_eq!(f.tensors()[0].name, "t");
    assert_eq!(f.tensor_data(&f.tensors()[0]).len(), 32);

    assert!(matches!(kind_of(with(&good, 0, b"GGUG")), GgufErrorKind::BadMagic(_)));
    assert!(matches!(kind_of(with(&good, 4, &1u32.to_le_bytes())), GgufErrorKind::UnsupportedVersion(1)));
    assert!(matches!(kind_of(with(&good, 4, &3u32.to_be_bytes())), GgufErrorKind::BigEndian));
    assert!(matches!(kind_of(with(&good, N_TENSORS_AT, &u64::MAX.to_le_bytes())), GgufErrorKind::CountTooLarge { .. }));
    assert!(matches!(kind_of(with(&good, N_KV_AT, &(1u64 << 40).to_le_bytes())), GgufErrorKind::CountTooLarge { .. }));
    assert!(matches!(kind_of(with(&good, KEY_LEN_AT, &u64::MAX.to_le_bytes())), GgufErrorKind::CountTooLarge { .. }));
    assert!(matches!(kind_of(with(&good, VALUE_TYPE_AT, &13u32.to_le_bytes())), GgufErrorKind::UnknownValueType(13)));
    assert!(matches!(kind_of(with(&good, N_DIMS_AT, &5u32.to_le_bytes())), GgufErrorKind::BadDimCount(5)));
    assert!(matches!(
        kind_of(with(&good, DTYPE_AT, &16u32.to_le_bytes())),
        GgufErrorKind::UnsupportedDType { id: 16, .. }
    ));
    assert!(matches!(kind_of(with(&good, OFFSET_AT, &32u64.to_le_bytes())), GgufErrorKind::DataOutOfRange { .. }));
    assert!(matches!(kind_of(with(&good, OFFSET_AT, &4u64.to_le_bytes())), GgufErrorKind::MisalignedTensor { .. }));
    assert!(matches!(kind_of(with(&good, KEY_LEN_AT + 8, &[0xff])), GgufErrorKind::BadUtf8));

    let msg =
        GgufFile::from_bytes("probe.gguf", with(&good, DTYPE_AT, &16u32.to_le_bytes())).err().unwrap().to_string();
    assert_eq!(
        msg,
        format!("probe.gguf: byte {DTYPE_AT}: tensor \"t\": unsupported tensor type IQ2_XXS (ggml type 16)")
    );
}

#[test]
fn shape_and_name_errors() {
    let mut w = GgufWriter::new();
    assert!(w.add_tensor("q", DType::Q8_0, &[33], vec![0; 34]).is_err(), "33 is not whole Q8_0 blocks");
    w.add_tensor("a", DType::F16, &[2], vec![0; 4]).unwrap();
    assert!(w.add_tensor("a", DType::F16, &[2], vec![0; 4]).is_err(), "duplicate name");
    // A row that is not whole blocks, written by hand: ne0 = 33 for Q8_0.
    let mut w = GgufWriter::new();
    w.add_tensor("q", DType::Q8_0, &[32], vec![0; 34]).unwrap();
    let bytes = w.to_bytes();
    let ne0_at = 24 + 8 + 1 + 4;
    assert!(matches!(
        kind_of(with(&bytes, ne0_at, &33u64.to_le_bytes())),
        GgufErrorKind::RowNotWholeBlocks { ne0: 33, .. }
    ));
    assert!(matches!(kind_of(with(&bytes, ne0_at, &(1u64 << 63).to_le_bytes())), GgufErrorKind::ShapeOverflow));
    // Two tensors with one name.
    let mut w = GgufWriter::new();
    w.add_tensor("a", DType::F32, &[1], vec![0; 4]).unwrap();
    w.add_tensor("b", DType::F32, &[1], vec![0; 4]).unwrap();
    let bytes = w.to_bytes();
    let second_name_at = 24 + 8 + 1 + 4 + 8 + 4 + 8 + 8;
    assert!(matches!(kind_of(with(&bytes, second_name_at, b"a")), GgufErrorKind::DuplicateTensor));
}

#[test]
fn writer_round_trips_every_value_type_and_alignment() {
    let values = vec![
        ("u8", Value::U8(200)),
        ("i8", Value::I8(-5)),
        ("u16", Value::U16(60000)),
        ("i16", Value::I16(-30000)),
        ("u32", Value::U32(4_000_000_000)),
        ("i32", Value::I32(-2_000_000_000)),
        ("f32", Value::F32(1.5e-6)),
        ("bool", Value::Bool(true)),
        ("str", Value::String("héllo\n".into())),
        ("u64", Value::U64(u64::MAX)),
        ("i64", Value::I64(i64::MIN)),
        ("f64", Value::F64(-2.25)),
        ("empty", Value::Array(ValueType::String, vec![])),
        (
            "nested",
            Value::Array(
                ValueType::Array,
                vec![
                    Value::Array(ValueType::I32, vec![Value::I32(1), Value::I32(-2)]),
                    Value::Array(ValueType::String, vec![Value::String("x".into())]),
                ],
            ),
        ),
        ("general.alignment", Value::U32(64)),
    ];
    let mut w = GgufWriter::new();
    for (k, v) in &values {
        w.set(k, v.clone());
    }
    w.add_tensor("a", DType::F32, &[3], [1f32, 2., 3.].iter().flat_map(|x| x.to_le_bytes()).collect()).unwrap();
    w.add_tensor("b", DType::F16, &[2, 3], vec![7; 12]).unwrap();
    let bytes = w.to_bytes();
    let f = GgufFile::from_bytes("w.gguf", bytes.clone()).expect("parses");
    assert_eq!(f.alignment(), 64);
    assert_eq!(f.data_offset() % 64, 0);
    for (k, v) in &values {
        assert_eq!(f.get(k), Some(v), "{k}");
    }
    let b = f.tensor("b").unwrap();
    assert_eq!(b.shape(), &[2, 3]);
    assert_eq!(b.offset % 64, 0);
    assert_eq!(f.tensor_data(b), &[7u8; 12]);
    assert_eq!(f.tensor_data(f.tensor("a").unwrap())[4..8], 2f32.to_le_bytes());

    // Version 2 has the same little-endian layout.
    let v2 = with(&bytes, 4, &2u32.to_le_bytes());
    assert_eq!(GgufFile::from_bytes("v2.gguf", v2).unwrap().version(), 2);

    // A bad alignment value is refused.
    let mut w = GgufWriter::new();
    w.set("general.alignment", Value::U32(64));
    let bytes = w.to_bytes();
    let value_at = 24 + 8 + "general.alignment".len() + 4;
    assert!(matches!(kind_of(with(&bytes, value_at, &48u32.to_le_bytes())), GgufErrorKind::BadAlignment(48)));
}

#[test]
fn deeply_nested_arrays_are_refused() {
    let mut v = Value::Array(ValueType::U8, vec![]);
    for _ in 0..20 {
        v = Value::Array(ValueType::Array, vec![v]);
    }
    let mut w = GgufWriter::new();
    w.set("deep", v);
    assert!(matches!(kind_of(w.to_bytes()), GgufErrorKind::NestingTooDeep));
}

#[test]
fn open_names_the_file_for_missing_empty_and_directory() {
    let dir = std::env::temp_dir().join(format!("hrx-gguf-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let empty = dir.join("empty.gguf");
    std::fs::write(&empty, b"").unwrap();
    for p in [dir.join("missing.gguf"), empty, dir.clone()] {
        let e = GgufFile::open(&p).err().expect("must fail");
        assert!(e.to_string().starts_with(&p.display().to_string()), "{e}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
