package all

import "github.com/pipebackup/pipe/plugins/storage/s3"

func init() { add("s3", s3.SourceType{}, s3.SinkType{}) }
