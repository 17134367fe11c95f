package all

import "github.com/pipebackup/pipe/plugins/storage/fs"

func init() { add("fs", fs.SourceType{}, fs.SinkType{}) }
