import json

from snakemake.utils import validate

validate(config, "../schemas/config.schema.yaml")

scattergather:
    corpus=config["corpus"]["shards"],
    decode=config["decode"]["shards"],


ENV = "../../envs/orthrus.yaml"
R = "results"
TEACHER = config["teacher"]["name"]


def settings(section):
    """A config section as JSON for `orthrus <command> --config {params.cfg:q}`."""
    return json.dumps(section, sort_keys=True)


def teacher_path():
    """The tiny teacher is built by the pipeline; an hf teacher is a hub id or directory."""
    if config["teacher"]["source"] == "tiny":
        return f"{R}/teacher"
    if not config["teacher"].get("path"):
        raise ValueError("teacher.path is required when teacher.source is 'hf'")
    return config["teacher"]["path"]


def teacher_input():
    return teacher_path() if config["teacher"]["source"] == "tiny" else []


def teacher_arg(wildcards, input):
    """The teacher as a command-line argument: the input directory, or the hub id / path."""
    return input[0] if config["teacher"]["source"] == "tiny" else teacher_path()


def scatter_index(item):
    """'2-of-4' -> (1, 4): the 0-based shard and the shard count."""
    i, n = item.split("-of-")
    return int(i) - 1, int(n)


def corpus_shards():
    return gather.corpus(f"{R}/corpus/shard_{{scatteritem}}.parquet")


def final_outputs():
    return corpus_shards()
