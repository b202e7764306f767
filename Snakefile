# Safe multi-agent RL: train -> evaluate, render, export -> aggregate -> figures, tables ->
# report -> wandb_upload. The config is config/config.yaml unless --configfile names another
# (see workflow/rules/common.smk); workflow/schemas/config.schema.yaml documents every key.


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/code.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/render.smk"
include: "workflow/rules/export.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/marl_eval.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/wandb.smk"


rule all:
    default_target: True
    input:
        final_targets(),
