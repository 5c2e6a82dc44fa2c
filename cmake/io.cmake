# File formats and data: safetensors, JSONL data, anchors, export.
