"""Stage 1, the model: ``policy`` (one causal LM and its tokenizer, sampling and
log-probs; a LoRA per role when asked), ``adapters`` (those per-role LoRAs) and
``sources`` (where a policy comes from: a Hugging Face name, a local folder, a GGUF, or
a registered plug-in such as ``tiny``)."""
