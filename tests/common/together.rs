//! Prompts prefilled together (`feed_together`) give each prompt the logits it gets alone, and
//! images encoded together (`encode_together`) each image the embeddings it gets alone.

use hrx::runtime::session::{feed_together, PromptPiece, Session};
use hrx::runtime::text_model::{Read, TextModel};
use hrx::runtime::vision_model::VisionModel;
use hrx::runtime::RuntimeError;

fn nmse(a: &[f32], b: &[f32]) -> f64 {
    let e: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum();
    e / b.iter().map(|y| f64::from(*y).powi(2)).sum::<f64>().max(f64::MIN_POSITIVE)
}

/// On `model` (4 sequences of at least 48 slots): four prompts of different lengths (one of
/// image rows and text, one of a single token, one shorter than an attention tile, one
/// longer than `model`'s chunk) at different depths of their sequences, fed together, match
/// each fed alone to `tolerance` (NMSE of the last logits), and their sessions end alike.
/// Then: two prompts in one sequence, and a prompt past its context, are refused before
/// anything moves.
pub fn prompts_fed_together_match_each_alone(model: &mut TextModel, tolerance: f64) {
    let (n_ctx, n_vocab, width) = (model.options().n_ctx, model.params().n_vocab, model.params().wide_width());
    assert!(model.options().n_seq >= 4 && n_ctx >= 48, "the model must hold 4 sequences of 48 slots");
    let token = |i: usize| PromptPiece::Token(((i * 7919 + 13) % n_vocab) as u32);
    let embeddings: Vec<f32> = (0..6 * width).map(|i| ((i * 37 % 101) as f32 / 101.0 - 0.5) * 0.1).collect();
    let mut with_image = vec![token(1), PromptPiece::Image { embeddings: &embeddings, rows: 2, cols: 3 }];
    with_image.extend((2..9).map(token));
    let long: Vec<PromptPiece> = (0..model.options().chunk + 5).map(token).take(n_ctx - 3).collect();
    let prompts = [(0, with_image), (1, vec![token(40)]), (2, (50..57).map(token).collect()), (3, long)];
    // Sequences 1 and 3 start at a depth: earlier turns in their caches.
    let at = |seq: usize, model: &mut TextModel| {
        let mut s = Session::at(seq * n_ctx);
        if seq % 2 == 1 {
            s.feed(model, &[token(90), token(91)]).expect("an earlier turn");
        }
        s
    };
    let alone: Vec<(Vec<f32>, Session)> = prompts
        .iter()
        .map(|(seq, pieces)| {
            let mut s = at(*seq, model);
            (s.feed(model, pieces).expect("alone"), s)
        })
        .collect();
    let mut sessions: Vec<Session> = prompts.iter().map(|(seq, _)| at(*seq, model)).collect();
    let mut fed: Vec<(&mut Session, &[PromptPiece])> =
        sessions.iter_mut().zip(&prompts).map(|(s, (_, p))| (s, p.as_slice())).collect();
    let together = feed_together(model, &mut fed, Read::Logits).expect("together").logits().expect("logits");
    assert_eq!(together.len(), prompts.len() * n_vocab);
    for (i, ((want, s_alone), got)) in alone.iter().zip(together.chunks_exact(n_vocab)).enumerate() {
        let e = nmse(got, want);
        eprintln!("prompt {i}: together vs alone nmse {e:.2e}");
        assert!(e <= tolerance, "prompt {i}: together vs alone nmse {e:.2e}");
        let s = &sessions[i];
        assert_eq!((s.n_past, s.next_position), (s_alone.n_past, s_alone.next_position), "prompt {i}: session");
    }
    // Refused, and nothing moved.
    let before: Vec<usize> = sessions.iter().map(|s| s.n_past).collect();
    let (first, rest) = sessions.split_at_mut(1);
    let mut same = Session::at(first[0].base);
    let two: &mut [(&mut Session, &[PromptPiece])] = &mut [(&mut first[0], &[token(1)]), (&mut same, &[token(2)])];
    assert!(matches!(feed_together(model, two, Read::Logits), Err(RuntimeError::Usage(_))));
    let too_long: Vec<PromptPiece> = (0..n_ctx).map(token).collect();
    let mut fed: Vec<(&mut Session, &[PromptPiece])> = rest.iter_mut().map(|s| (s, too_long.as_slice())).collect();
    assert!(matches!(feed_together(model, &mut fed, Read::Argmax), Err(RuntimeError::ContextFull { .. })));
    let after: Vec<usize> = sessions.iter().map(|s| s.n_past).collect();
    assert_eq!(before, after, "a refused feed moves no session");
}

/// On `vision` (planned for at least 56 patches): three images of different grids (6x4, 2x2,
/// 4x6 patches) encoded in one run match each encoded alone to `tolerance` (NMSE), one encoded
/// alone twice gets the same rows, and a run past the planned patches is refused.
pub fn images_encoded_together_match_each_alone(vision: &mut VisionModel, tolerance: f64) {
    let row = vision.params().patch_row();
    let grids = [(6, 4), (2, 2), (4, 6)];
    let pixels: Vec<Vec<f32>> = grids
        .iter()
        .enumerate()
        .map(|(k, &(h, w))| (0..h * w * row).map(|i| (((i * 31 + k * 7) % 97) as f32 / 97.0 - 0.5) * 2.0).collect())
        .collect();
    let images: Vec<(&[f32], usize, usize)> =
        pixels.iter().zip(grids).map(|(p, (h, w))| (p.as_slice(), h, w)).collect();
    // The smallest image first: the Vulkan executor's kept staging buffer for reads of the
    // output then grows for the run of three, and serves the smaller reads after it.
    let (p1, h1, w1) = images[1];
    let first = vision.encode(p1, h1, w1).expect("alone first");
    let together = vision.encode_together(&images).expect("together");
    assert_eq!(together.len(), images.len());
    for (i, (&(p, h, w), got)) in images.iter().zip(&together).enumerate() {
        let want = vision.encode(p, h, w).expect("alone");
        if i == 1 {
            assert!(
                want[..] == first[..],
                "image 1: encoded alone twice, read through other staging, kept across runs"
            );
        }
        assert_eq!(got.len(), want.len(), "image {i}: rows");
        let e = nmse(got, &want);
        eprintln!("image {i} ({h}x{w}): together vs alone nmse {e:.2e}");
        assert!(e <= tolerance, "image {i}: together vs alone nmse {e:.2e}");
    }
    let too_many = vec![images[0]; vision.max_patches() / 24 + 1];
    assert!(matches!(vision.encode_together(&too_many), Err(RuntimeError::Usage(_))));
}
