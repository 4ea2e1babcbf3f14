//! The Qwen3-VL Instruct chat template, built in: optional system turn, user turns whose
//! content mixes text and images, and the generation prompt. Matches the template embedded in
//! the GGUF (`tokenizer.chat_template`) for these cases.

pub const IM_START: &str = "<|im_start|>";
pub const IM_END: &str = "<|im_end|>";
pub const VISION_START: &str = "<|vision_start|>";
pub const IMAGE_PAD: &str = "<|image_pad|>";
pub const VISION_END: &str = "<|vision_end|>";

#[derive(Clone, Debug, PartialEq)]
pub enum Content {
    Text(String),
    /// An image at this place; its pads are expanded after tokenization.
    Image,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    pub role: String,
    pub content: Vec<Content>,
}

impl Message {
    pub fn text(role: &str, text: &str) -> Message {
        Message { role: role.to_owned(), content: vec![Content::Text(text.to_owned())] }
    }
}

/// The prompt text, with one `<|image_pad|>` per image, ending with the assistant's turn
/// opened when `add_generation_prompt`.
pub fn render(messages: &[Message], add_generation_prompt: bool) -> String {
    let mut out = String::new();
    for m in messages {
        out.push_str(IM_START);
        out.push_str(&m.role);
        out.push('\n');
        for c in &m.content {
            match c {
                Content::Text(t) => out.push_str(t),
                Content::Image => {
                    out.push_str(VISION_START);
                    out.push_str(IMAGE_PAD);
                    out.push_str(VISION_END);
                }
            }
        }
        out.push_str(IM_END);
        out.push('\n');
    }
    if add_generation_prompt {
        out.push_str(IM_START);
        out.push_str("assistant\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_user_turn_with_image_before_text() {
        let m = Message {
            role: "user".into(),
            content: vec![Content::Image, Content::Text("Describe this image.".into())],
        };
        assert_eq!(
            render(&[m], true),
            "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe this image.<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn system_turn_comes_first_when_given() {
        let text = render(&[Message::text("system", "Be brief."), Message::text("user", "Hi")], false);
        assert_eq!(text, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
    }
}
