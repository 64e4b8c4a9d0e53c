"""Train a small BERT-style classifier with the Hugging Face Trainer.

The model is built from a config (no download) and the data is synthetic, so the example runs
offline; swap in `AutoModelForSequenceClassification.from_pretrained(...)` and a `datasets`
dataset for real work."""

import argparse

import torch
from transformers import BertConfig
from transformers import BertForSequenceClassification
from transformers import Trainer
from transformers import TrainingArguments


class SyntheticTexts(torch.utils.data.Dataset):
    """Token sequences whose label is whether token 7 occurs in them."""

    def __init__(self, size: int, seq_len: int = 32, vocab: int = 1000, seed: int = 0):
        generator = torch.Generator().manual_seed(seed)
        self.input_ids = torch.randint(8, vocab, (size, seq_len), generator=generator)
        has_seven = torch.rand(size, generator=generator) < 0.5
        self.input_ids[has_seven, 3] = 7
        self.labels = has_seven.long()

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {
            "input_ids": self.input_ids[i],
            "attention_mask": torch.ones_like(self.input_ids[i]),
            "labels": self.labels[i],
        }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", default="outputs")
    parser.add_argument("--epochs", type=float, default=1)
    args = parser.parse_args()

    config = BertConfig(
        vocab_size=1000,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=64,
        num_labels=2,
    )
    model = BertForSequenceClassification(config)

    training_args = TrainingArguments(
        output_dir=args.output_dir,
        num_train_epochs=args.epochs,
        per_device_train_batch_size=16,
        per_device_eval_batch_size=32,
        learning_rate=5e-4,
        warmup_steps=10,
        weight_decay=0.01,
        fp16=True,
        eval_strategy="epoch",
        save_strategy="epoch",
        load_best_model_at_end=True,
        logging_steps=10,
        dataloader_num_workers=2,
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=SyntheticTexts(2048),
        eval_dataset=SyntheticTexts(256, seed=1),
    )
    trainer.train()
    trainer.save_model(args.output_dir)


if __name__ == "__main__":
    main()
