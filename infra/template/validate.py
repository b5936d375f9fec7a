#!/usr/bin/env python3
"""Checks a SAM template offline, as `sam validate --lint` does.

    python3 infra/template/validate.py [TEMPLATE]           (make validate)
    python3 infra/template/validate.py --transform TEMPLATE [PARAMETERS_JSON]

The first form runs the SAM translator (aws-sam-translator: what
CloudFormation runs for the template's AWS::Serverless transform) with the
parameters' defaults, then cfn-lint over the template, and exits non-zero
if either finds anything. The second prints the translated template as
JSON, with the parameter values given (a JSON object of name to value),
for infra/template/sam_test.go to check what CloudFormation would create.

Needs python3 with aws-sam-translator and cfn-lint
(pip install aws-sam-translator cfn-lint); no AWS account or network.
"""
import json
import os
import sys

# The translator needs a region (any: it names no real resource).
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")


class NoManagedPolicies:
    """The template's policies are inline: no managed policy is looked up."""

    def load(self):
        return {}


def transform(path, parameters):
    from samtranslator.translator.transform import transform as sam_transform
    from samtranslator.yaml_helper import yaml_parse

    with open(path) as f:
        template = yaml_parse(f.read())
    # sam deploy uploads the build to S3 and points CodeUri there; the
    # translator wants such a URI.
    for resource in template.get("Resources", {}).values():
        if resource.get("Type") == "AWS::Serverless::Function":
            resource.setdefault("Properties", {})["CodeUri"] = "s3://mcpgate-artifacts/gateway.zip"
    return sam_transform(template, parameters, NoManagedPolicies())


def validate(path):
    from samtranslator.model.exceptions import InvalidDocumentException

    try:
        transform(path, {})
    except InvalidDocumentException as err:
        print(f"{path}: the SAM translator refuses it:", file=sys.stderr)
        for cause in err.causes:
            print(f"  {cause.message}", file=sys.stderr)
        return 1
    print(f"{path}: the SAM translator accepts it")

    from cfnlint.runner import main as cfn_lint

    sys.argv = ["cfn-lint", path]
    try:
        cfn_lint()
        code = 0
    except SystemExit as exit:
        code = exit.code or 0
    # cfn-lint's exit code is a bit set: 2 errors, 4 warnings, 8 notes.
    if code:
        print(f"{path}: cfn-lint reports findings (exit {code})", file=sys.stderr)
        return 1
    print(f"{path}: cfn-lint reports nothing")
    return 0


def main(argv):
    if argv[1:2] == ["--transform"] and len(argv) in (3, 4):
        parameters = json.loads(argv[3]) if len(argv) == 4 else {}
        print(json.dumps(transform(argv[2], parameters)))
        return 0
    if len(argv) > 2 or argv[1:2] and argv[1].startswith("-"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    return validate(argv[1] if len(argv) == 2 else "template.yaml")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
