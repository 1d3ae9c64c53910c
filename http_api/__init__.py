"""HTTP frontend (OpenAI audio API, Willow Inference Server API): see issue 5."""
