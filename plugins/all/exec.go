package all

import "github.com/pipebackup/pipe/plugins/command/exec"

func init() { add("exec", exec.SourceType{}, exec.SinkType{}) }
