//! Model files whose data do not match their header or metadata are refused at load, each with
//! one line naming the tensor and its bytes: overlapping or misplaced tensor data, a norm
//! stored in a quantized type, a `block_count` that leaves layers unread, a relabelled type
//! (the last tensor's too, by the bytes it leaves unowned).
//! (Each of these mutations of an oracle file used to load and run with wrong output.)

mod common;

use hrx::gguf::{GgufErrorKind, GgufFile, GgufWriter, TensorInfo, Value, ValueType};
use hrx::model::{TextParams, VisionParams};
use hrx::quant::{quantize_row, DType, FILE_DTYPES};
use std::path::Path;

/// `path` rewritten through the writer: every key and tensor copied, with `key` set to `value`
/// and `retype` giving some tensors a new type (their values re-encoded).
fn rewritten(path: &Path, key: Option<(&str, Value)>, retype: Option<(&str, DType)>) -> GgufFile {
    let file = GgufFile::open(path).expect("oracle file opens");
    let mut w = GgufWriter::new();
    for (k, v) in file.metadata() {
        match &key {
            Some((name, value)) if name == k => w.set(k, value.clone()),
            _ => w.set(k, v.clone()),
        }
    }
    for t in file.tensors() {
        let data = file.tensor_data(t).to_vec();
        let (dtype, data) = match retype {
            Some((name, dtype)) if name == t.name => (dtype, reencoded(t, &data, dtype)),
            _ => (t.dtype, data),
        };
        w.add_tensor(&t.name, dtype, t.shape(), data).expect("tensor fits the writer");
    }
    GgufFile::from_bytes(path.to_path_buf(), w.to_bytes()).expect("a rewritten file parses")
}

/// An F32 tensor's values in `dtype`.
fn reencoded(t: &TensorInfo, data: &[u8], dtype: DType) -> Vec<u8> {
    assert_eq!(t.dtype, DType::F32, "{}", t.name);
    let x: Vec<f32> = data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    let mut out = vec![0u8; dtype.row_bytes(x.len() as u64).unwrap() as usize];
    quantize_row(dtype, &x, &mut out).unwrap();
    out
}

fn text_error(file: &GgufFile) -> String {
    TextParams::from_gguf(file).expect_err("the file is refused").to_string()
}

#[test]
fn the_oracle_files_load_as_written() {
    let Some(oracle) = common::oracle() else { return };
    let tiny = oracle.join("models/tiny");
    let text = rewritten(&tiny.join("qwen3vl-tiny-F16.gguf"), None, None);
    assert!(TextParams::from_gguf(&text).is_ok());
    let vision = rewritten(&tiny.join("mmproj-qwen3vl-tiny-F16.gguf"), None, None);
    assert!(VisionParams::from_gguf(&vision).is_ok());
}

#[test]
fn a_block_count_that_leaves_layers_unread_is_refused() {
    let Some(oracle) = common::oracle() else { return };
    let path = oracle.join("models/tiny/qwen3vl-tiny-F16.gguf");
    let n_layer = TextParams::from_gguf(&GgufFile::open(&path).unwrap()).unwrap().n_layer;
    assert!(n_layer > 1, "the tiny model has layers to drop");
    let file = rewritten(&path, Some(("qwen3vl.block_count", Value::U32(1))), None);
    let msg = text_error(&file);
    assert!(msg.contains("tensor \"blk.1.") && msg.contains("(bytes "), "{msg}");
    assert!(msg.contains("is not read by the model its metadata describes"), "{msg}");
}

#[test]
fn a_norm_in_a_quantized_type_is_refused() {
    let Some(oracle) = common::oracle() else { return };
    let path = oracle.join("models/tiny/qwen3vl-tiny-F16.gguf");
    let file = rewritten(&path, None, Some(("blk.0.attn_norm.weight", DType::Q8_0)));
    let msg = text_error(&file);
    assert!(msg.contains("tensor \"blk.0.attn_norm.weight\" (bytes "), "{msg}");
    assert!(msg.contains("is Q8_0, expected F32 or F16 or BF16"), "{msg}");
    // The projector's vectors (norms, biases) likewise.
    let path = oracle.join("models/tiny/mmproj-qwen3vl-tiny-F16.gguf");
    let file = rewritten(&path, None, Some(("v.blk.0.ln1.weight", DType::Q8_0)));
    let msg = VisionParams::from_gguf(&file).expect_err("refused").to_string();
    assert!(msg.contains("tensor \"v.blk.0.ln1.weight\" (bytes ") && msg.contains("is Q8_0, expected F32"), "{msg}");
}

/// Where tensor `t`'s entry in the table of `bytes` keeps its first dimension: a tensor info is
/// its name (u64 length, bytes), n_dims (u32), the dims (u64 each), the type (u32), the offset.
fn dims_at(bytes: &[u8], t: &TensorInfo) -> usize {
    let mut key = (t.name.len() as u64).to_le_bytes().to_vec();
    key.extend_from_slice(t.name.as_bytes());
    let at = bytes.windows(key.len()).position(|w| w == key).expect("tensor info found");
    at + key.len() + 4
}

/// The bytes of `path` with tensor `name`'s type field set to `dtype` (nothing else changed).
fn relabelled(path: &Path, name: &str, dtype: DType) -> Vec<u8> {
    let mut bytes = std::fs::read(path).unwrap();
    let file = GgufFile::open(path).unwrap();
    let t = file.tensor(name).expect("tensor present");
    let type_at = dims_at(&bytes, t) + 8 * t.n_dims;
    assert_eq!(u32::from_le_bytes(bytes[type_at..type_at + 4].try_into().unwrap()), t.dtype.ggml_id());
    bytes[type_at..type_at + 4].copy_from_slice(&dtype.ggml_id().to_le_bytes());
    bytes
}

/// Every change of one field of one tensor's entry in the table (its type to every other type,
/// its data offset by -32, +1 and +32 bytes, each dimension doubled, halved and plus one) in the
/// tiny text model and its projector is refused at load, but one kind: a type relabelled to one
/// of the same bytes per row (F16 and BF16, say), which no reader can tell from the bytes
/// (llama.cpp loads it too). Issue 11's mutated model files had 15 that loaded and ran with
/// wrong output (overlapping data, relabelled types, unread layers): this is the recount, with
/// `--nocapture` the counts.
#[test]
fn every_mutation_of_the_tensor_table_is_refused_but_same_size_relabels() {
    let Some(oracle) = common::oracle() else { return };
    let tiny = oracle.join("models/tiny");
    for (file, text) in [("qwen3vl-tiny-F16.gguf", true), ("mmproj-qwen3vl-tiny-F16.gguf", false)] {
        let path = tiny.join(file);
        let original = std::fs::read(&path).unwrap();
        let parsed = GgufFile::open(&path).unwrap();
        let loads = |bytes: Vec<u8>| match GgufFile::from_bytes(file, bytes) {
            Err(_) => false,
            Ok(f) if text => TextParams::from_gguf(&f).is_ok(),
            Ok(f) => VisionParams::from_gguf(&f).is_ok(),
        };
        let (mut tried, mut refused, mut relabels) = (0, 0, Vec::new());
        for t in parsed.tensors() {
            let dims = dims_at(&original, t);
            let (type_at, offset_at) = (dims + 8 * t.n_dims, dims + 8 * t.n_dims + 4);
            let mut mutations: Vec<(usize, Vec<u8>, Option<DType>)> = Vec::new();
            for d in FILE_DTYPES.iter().filter(|&&d| d != t.dtype) {
                mutations.push((type_at, d.ggml_id().to_le_bytes().to_vec(), Some(*d)));
            }
            for offset in [t.offset.wrapping_sub(32), t.offset + 1, t.offset + 32] {
                mutations.push((offset_at, offset.to_le_bytes().to_vec(), None));
            }
            for (i, &n) in t.shape().iter().enumerate() {
                for m in [n * 2, n / 2, n + 1] {
                    mutations.push((dims + 8 * i, m.to_le_bytes().to_vec(), None));
                }
            }
            for (at, value, dtype) in mutations {
                let mut bytes = original.clone();
                bytes[at..at + value.len()].copy_from_slice(&value);
                tried += 1;
                if !loads(bytes) {
                    refused += 1;
                    continue;
                }
                let same_size = dtype.is_some_and(|d| d.row_bytes(t.ne[0]) == t.dtype.row_bytes(t.ne[0]));
                assert!(same_size, "{file}: {} loads with {value:?} at byte {at} ({dtype:?})", t.name);
                relabels.push(format!("{} {} -> {}", t.name, t.dtype, dtype.map_or(String::new(), |d| d.to_string())));
            }
        }
        eprintln!("{file}: {tried} mutations, {refused} refused, {} loaded: {relabels:?}", relabels.len());
        assert_eq!(tried, refused + relabels.len());
        assert!(refused > 0 && tried > 200, "{file}: {tried} tried");
    }
}

#[test]
fn a_relabelled_tensor_type_is_refused_where_its_data_would_end() {
    let Some(oracle) = common::oracle() else { return };
    let path = oracle.join("models/small/qwen3vl-small-Q4_K_M.gguf");
    let file = GgufFile::open(&path).unwrap();
    let ffn_up = file.tensor("blk.0.ffn_up.weight").expect("ffn_up");
    assert_eq!(ffn_up.dtype, DType::Q4K);
    // Q2_K blocks are smaller: the next tensor's data no longer starts where this one ends.
    let err = GgufFile::from_bytes("probe.gguf", relabelled(&path, "blk.0.ffn_up.weight", DType::Q2K))
        .err()
        .expect("refused");
    assert!(matches!(err.kind, GgufErrorKind::DataMisplaced { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.starts_with("probe.gguf: byte ") && msg.contains("tensor \""), "{msg}");
    assert!(msg.contains("should start at byte"), "{msg}");
}

#[test]
fn the_last_tensor_relabelled_to_a_smaller_type_is_refused_by_the_bytes_left_over() {
    let Some(oracle) = common::oracle() else { return };
    // The last tensor of each file: F16 is allowed for both roles (a norm, the position
    // table), so only the bytes it leaves unowned at the end of the file give it away.
    for file in ["qwen3vl-tiny-F16.gguf", "mmproj-qwen3vl-tiny-F16.gguf"] {
        let path = oracle.join("models/tiny").join(file);
        let original = GgufFile::open(&path).unwrap();
        let last = original.tensors().last().expect("tensors");
        assert_eq!(last.dtype, DType::F32, "{file}: {}", last.name);
        let err = GgufFile::from_bytes("probe.gguf", relabelled(&path, &last.name, DType::F16))
            .err()
            .unwrap_or_else(|| panic!("{file}: {} as F16 is refused", last.name));
        match err.kind {
            GgufErrorKind::TrailingData { end, file_len } => {
                assert_eq!(file_len, original.file_len(), "{file}");
                assert_eq!(end, last.file_offset + last.n_bytes / 2, "{file}: the F16 data end there (aligned)");
            }
            ref other => panic!("{file}: {other}"),
        }
        let msg = err.to_string();
        let place =
            format!("tensor {:?} (bytes {}..{})", last.name, last.file_offset, last.file_offset + last.n_bytes / 2);
        assert!(msg.contains(&place) && msg.contains("belong to no tensor"), "{msg}");
    }
}

#[test]
fn overlapping_and_misplaced_tensor_data_are_refused() {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("test".into()));
    for name in ["a", "b", "c"] {
        w.add_tensor(name, DType::F32, &[8], vec![0u8; 32]).unwrap();
    }
    let good = w.to_bytes();
    let file = GgufFile::from_bytes("probe.gguf", good.clone()).expect("parses");
    assert_eq!(file.tensors().iter().map(|t| t.offset).collect::<Vec<_>>(), [0, 32, 64]);
    // b's offset field: after its name, n_dims (u32), one dim (u64) and the type (u32).
    let key = [&1u64.to_le_bytes()[..], b"b"].concat();
    let offset_of_b = good.windows(key.len()).position(|w| w == key).unwrap() + key.len() + 4 + 8 + 4;
    // b's data on a's bytes, and on c's (leaving a gap): both inside the file, both refused.
    for offset in [0u64, 64] {
        let mut bytes = good.clone();
        bytes[offset_of_b..offset_of_b + 8].copy_from_slice(&offset.to_le_bytes());
        match GgufFile::from_bytes("probe.gguf", bytes).map_err(|e| e.kind) {
            Err(GgufErrorKind::DataMisplaced { start, expected, .. }) => {
                assert_eq!((start, expected), (file.data_offset() + offset, file.data_offset() + 32))
            }
            other => panic!("b at {offset}: {:?}", other.map(|_| "parsed")),
        }
    }
}

/// The bytes of a scalar metadata value, little-endian.
fn scalar_bytes(v: &Value) -> Option<Vec<u8>> {
    Some(match *v {
        Value::U8(x) => vec![x],
        Value::I8(x) => x.to_le_bytes().to_vec(),
        Value::Bool(x) => vec![u8::from(x)],
        Value::U16(x) => x.to_le_bytes().to_vec(),
        Value::I16(x) => x.to_le_bytes().to_vec(),
        Value::U32(x) => x.to_le_bytes().to_vec(),
        Value::I32(x) => x.to_le_bytes().to_vec(),
        Value::F32(x) => x.to_le_bytes().to_vec(),
        Value::U64(x) => x.to_le_bytes().to_vec(),
        Value::I64(x) => x.to_le_bytes().to_vec(),
        Value::F64(x) => x.to_le_bytes().to_vec(),
        _ => return None,
    })
}

/// The same bytes read as a scalar of type `to` (None where they are no such value).
fn scalar_as(b: &[u8], to: ValueType) -> Option<Value> {
    Some(match (to, b.len()) {
        (ValueType::U8, 1) => Value::U8(b[0]),
        (ValueType::I8, 1) => Value::I8(b[0] as i8),
        (ValueType::Bool, 1) if b[0] <= 1 => Value::Bool(b[0] == 1),
        (ValueType::U16, 2) => Value::U16(u16::from_le_bytes(b.try_into().ok()?)),
        (ValueType::I16, 2) => Value::I16(i16::from_le_bytes(b.try_into().ok()?)),
        (ValueType::U32, 4) => Value::U32(u32::from_le_bytes(b.try_into().ok()?)),
        (ValueType::I32, 4) => Value::I32(i32::from_le_bytes(b.try_into().ok()?)),
        (ValueType::F32, 4) => Value::F32(f32::from_le_bytes(b.try_into().ok()?)),
        (ValueType::U64, 8) => Value::U64(u64::from_le_bytes(b.try_into().ok()?)),
        (ValueType::I64, 8) => Value::I64(i64::from_le_bytes(b.try_into().ok()?)),
        (ValueType::F64, 8) => Value::F64(f64::from_le_bytes(b.try_into().ok()?)),
        _ => return None,
    })
}

/// `v` with its type (an array's element type) relabelled to `to`, its bytes unchanged: what a
/// writer that mixed up a key's type produces.
fn relabelled_value(v: &Value, to: ValueType) -> Option<Value> {
    match v {
        Value::Array(from, items) if *from != to => {
            let items: Option<Vec<Value>> = items.iter().map(|i| scalar_as(&scalar_bytes(i)?, to)).collect();
            Some(Value::Array(to, items?))
        }
        Value::Array(..) => None,
        v if v.value_type() == to => None,
        v => scalar_as(&scalar_bytes(v)?, to),
    }
}

/// Every metadata key of the tiny text model and its projector, its type relabelled to every
/// other type of the same size (the bytes kept), is refused at load or read as the same
/// parameters: none runs with a misread value. (Issue 54 found an rms epsilon stored as U32
/// read as 897,988,541, and a rope base stored as I32.) With `--nocapture`, the counts.
#[test]
fn a_metadata_key_of_the_wrong_type_is_refused_not_misread() {
    let Some(oracle) = common::oracle() else { return };
    let tiny = oracle.join("models/tiny");
    let types = [
        ValueType::U8,
        ValueType::I8,
        ValueType::Bool,
        ValueType::U16,
        ValueType::I16,
        ValueType::U32,
        ValueType::I32,
        ValueType::F32,
        ValueType::U64,
        ValueType::I64,
        ValueType::F64,
    ];
    for (file, text) in [("qwen3vl-tiny-F16.gguf", true), ("mmproj-qwen3vl-tiny-F16.gguf", false)] {
        let path = tiny.join(file);
        let original = GgufFile::open(&path).unwrap();
        let params = |f: &GgufFile| match text {
            true => TextParams::from_gguf(f).map(|p| format!("{p:?}")).map_err(|e| e.to_string()),
            false => VisionParams::from_gguf(f).map(|p| format!("{p:?}")).map_err(|e| e.to_string()),
        };
        let want = params(&original).expect("the oracle file loads");
        let (mut tried, mut refused, mut same) = (0, 0, 0);
        for (key, value) in original.metadata() {
            for &to in &types {
                let Some(mutated) = relabelled_value(value, to) else { continue };
                tried += 1;
                match params(&rewritten(&path, Some((key, mutated.clone())), None)) {
                    Err(e) => {
                        refused += 1;
                        assert!(!e.contains("panicked"), "{e}");
                    }
                    Ok(got) => {
                        assert_eq!(got, want, "{file}: {key} stored as {mutated:?} was read as other parameters");
                        same += 1;
                    }
                }
            }
        }
        println!(
            "{file}: {tried} type relabels of its metadata: {refused} refused, {same} read as the same parameters"
        );
        assert!(refused > 10, "{file}: {refused} of {tried}");
    }
    // The epsilon stored as U32, named with both types.
    let path = tiny.join("qwen3vl-tiny-F16.gguf");
    let eps = GgufFile::open(&path).unwrap().get("qwen3vl.attention.layer_norm_rms_epsilon").unwrap().clone();
    let file = rewritten(
        &path,
        Some(("qwen3vl.attention.layer_norm_rms_epsilon", relabelled_value(&eps, ValueType::U32).unwrap())),
        None,
    );
    let msg = text_error(&file);
    assert!(
        msg.contains("\"qwen3vl.attention.layer_norm_rms_epsilon\"")
            && msg.contains("is stored as u32; the model reads a float (f32 or f64)"),
        "{msg}"
    );
}
