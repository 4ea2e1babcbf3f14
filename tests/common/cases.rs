//! Reading oracle cases: JSON fields and raw f32 arrays.

use std::path::{Path, PathBuf};
use tinyjson::JsonValue;

pub struct Case {
    pub dir: PathBuf,
    pub name: String,
    pub json: JsonValue,
}

impl Case {
    pub fn load(dir: &Path, name: &str) -> Case {
        let path = dir.join(format!("{name}.json"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Case { dir: dir.to_path_buf(), name: name.to_owned(), json: text.parse().expect("case JSON") }
    }

    pub fn ids(&self, key: &str) -> Vec<u32> {
        ids_of(&self.json[key])
    }

    pub fn f32_array(&self, array: &str) -> Vec<f32> {
        let path = self.dir.join(format!("{}.{array}.f32", self.name));
        read_f32(&path)
    }

    /// The text item of the first message's content.
    pub fn user_text(&self) -> String {
        let messages: &Vec<JsonValue> = self.json["messages"].get().expect("messages");
        let content: &Vec<JsonValue> = messages[0]["content"].get().expect("content");
        content
            .iter()
            .find_map(|c| {
                c.get::<std::collections::HashMap<String, JsonValue>>()?.get("text")?.get::<String>().cloned()
            })
            .expect("a text item")
    }

    /// The image of an image case as HF's processor made it (`images/<stem>.pixel_values.f32`).
    pub fn hf_patches(&self, oracle: &Path) -> hrx::image::Patches {
        let image = &self.json["image"];
        let grid = ids_of(&image["image_grid_thw"]);
        let hw = ids_of(&image["resized_hw"]);
        let file: &String = image["pixel_values"]["file"].get().expect("pixel_values file");
        hrx::image::Patches {
            pixel_values: read_f32(&oracle.join("images").join(file)),
            grid_thw: [grid[0] as usize, grid[1] as usize, grid[2] as usize],
            resized_hw: (hw[0] as usize, hw[1] as usize),
            patch_dim: 1536,
            merge_size: 2,
        }
    }

    /// Greedy reference: ids and the per-step top1-top2 margins.
    pub fn greedy(&self) -> (Vec<u32>, Vec<f64>) {
        let g = &self.json["greedy"];
        let steps: &Vec<JsonValue> = g["steps"].get().expect("steps");
        let margins = steps.iter().map(|s| *s["margin"].get::<f64>().expect("margin")).collect();
        (ids_of(&g["ids"]), margins)
    }
}

pub fn ids_of(v: &JsonValue) -> Vec<u32> {
    let items: &Vec<JsonValue> = v.get().expect("array");
    items.iter().map(|x| *x.get::<f64>().expect("number") as u32).collect()
}

pub fn read_f32(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "length");
    a.iter().zip(b).map(|(x, y)| f64::from((x - y).abs())).fold(0.0, f64::max)
}

/// Max abs difference of log-softmax values over the reference's top `k` tokens.
pub fn top_logprob_gap(ours: &[f32], reference: &[f32], k: usize) -> f64 {
    let lse = |v: &[f32]| {
        let m = v.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        m + v.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln()
    };
    let (la, lb) = (lse(ours), lse(reference));
    let mut idx: Vec<usize> = (0..reference.len()).collect();
    idx.sort_by(|&i, &j| reference[j].total_cmp(&reference[i]));
    idx.iter().take(k).map(|&i| ((ours[i] as f64 - la) - (reference[i] as f64 - lb)).abs()).fold(0.0, f64::max)
}

/// Tokens compared under the near-tie rule: up to the first step whose reference margin is
/// below `2 * tol`; returns (steps compared, steps equal before the first difference).
pub fn greedy_agreement(ours: &[u32], reference: &[u32], margins: &[f64], tol: f64) -> (usize, usize) {
    let comparable = margins.iter().position(|&m| m < 2.0 * tol).map_or(reference.len(), |p| p + 1);
    let comparable = comparable.min(reference.len()).min(ours.len());
    let equal = ours.iter().zip(reference).take(comparable).take_while(|(a, b)| a == b).count();
    (comparable, equal)
}
