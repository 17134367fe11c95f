package all

import "github.com/pipebackup/pipe/plugins/storage/azure"

func init() { add("azure", azure.SourceType{}, azure.SinkType{}) }
