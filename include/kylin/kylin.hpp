// kylin: the umbrella header. One include gives the whole library; each area adds its public
// headers here.
#pragma once

#include "kylin/core/dtype.hpp"
#include "kylin/core/error.hpp"
#include "kylin/core/json.hpp"
#include "kylin/core/thread_pool.hpp"
#include "kylin/io/checkpoint.hpp"
#include "kylin/io/config.hpp"
#include "kylin/io/mapped_file.hpp"
#include "kylin/io/safetensors.hpp"
#include "kylin/model/descriptors.hpp"
#include "kylin/model/model.hpp"
#include "kylin/tokenizer/tokenizer.hpp"
#include "kylin/tokenizer/stream_decoder.hpp"
#include "kylin/chat/chat_template.hpp"
#include "kylin/generate/sampler.hpp"
#include "kylin/generate/session.hpp"
#include "kylin/generate/embed.hpp"
#include "kylin/io/sentence_transformers.hpp"
#include "kylin/eigen.hpp"
