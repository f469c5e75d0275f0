# The bug zoo (configs/zoo.yaml, docs/ZOO.md): every case at its affected and its fixed release, each
# release in an environment of its own, judged by the study's verdicts, one record. Thin rules: the
# steps are `orthrus zoo ...` commands (orthrus/zoo/cli.py). A release that does not install, or a
# driver that fails, is a row of the record, not a failed job: the other cases go on.
from orthrus.zoo.envs import env_name

ZR = "results/zoo"
ZOO_CONFIG = workflow.overwrite_configfiles[-1]
ZOO_CASES = ZOO.selected()
# one environment per release, built once even where two cases share it: {env name: (case, side)}
ZOO_ENVS = {}
for _case, _c in ZOO_CASES.items():
    for _side in ("affected", "fixed"):
        ZOO_ENVS.setdefault(env_name(_c, getattr(_c, _side)), (_case, _side))


def zoo_env(case, side):
    c = ZOO_CASES[case]
    return f"{ZR}/envs/{env_name(c, getattr(c, side))}.json"


def zoo_subject(case):
    return f"{ZR}/subjects/{ZOO_CASES[case].subject}.json"


wildcard_constraints:
    case="|".join(ZOO_CASES) or "-",
    side="affected|fixed",


rule zoo_subject:
    output:
        f"{ZR}/subjects/{{kind}}.json"
    log:
        f"{ZR}/logs/subject-{{kind}}.log"
    shell:
        "orthrus zoo subject {wildcards.kind:q} {output:q} > {log:q} 2>&1"


rule zoo_env:
    output:
        f"{ZR}/envs/{{env}}.json"
    params:
        case=lambda w: ZOO_ENVS[w.env][0],
        side=lambda w: ZOO_ENVS[w.env][1],
    log:
        f"{ZR}/logs/env-{{env}}.log"
    shell:
        "orthrus zoo env {ZOO_CONFIG:q} {params.case:q} {params.side:q} {output:q} 2> {log:q}"


rule zoo_plan:
    input:
        subject=lambda w: zoo_subject(w.case),
        env=lambda w: zoo_env(w.case, "affected"),
    output:
        f"{ZR}/{{case}}/plan.json"
    log:
        f"{ZR}/logs/{{case}}-plan.log"
    shell:
        "orthrus zoo plan {ZOO_CONFIG:q} {wildcards.case:q} {input.subject:q} {input.env:q} {output:q} 2>> {log:q} | tee -a {log:q}"


rule zoo_run:
    input:
        subject=lambda w: zoo_subject(w.case),
        env=lambda w: zoo_env(w.case, w.side),
        plan=f"{ZR}/{{case}}/plan.json",
    output:
        f"{ZR}/{{case}}/{{side}}.json"
    log:
        f"{ZR}/logs/{{case}}-{{side}}.log"
    shell:
        "orthrus zoo run {ZOO_CONFIG:q} {wildcards.case:q} {wildcards.side:q} {input.subject:q} {input.env:q} {input.plan:q} {output:q} 2>> {log:q} | tee -a {log:q}"


rule zoo_record:
    input:
        expand(f"{ZR}/{{case}}/{{side}}.json", case=list(ZOO_CASES), side=["affected", "fixed"])
    output:
        f"{ZR}/record/zoo.csv", f"{ZR}/record/zoo.md", f"{ZR}/record/zoo.png"
    log:
        f"{ZR}/logs/record.log"
    shell:
        "orthrus zoo record {ZOO_CONFIG:q} {input:q} --out {ZR:q}/record > {log:q} 2>&1 && cat {ZR:q}/record/zoo.md"
