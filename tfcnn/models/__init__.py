"""The tfcnn model zoo.

    from tfcnn.models import create_model, list_models, model_info
    model = create_model("resnet50")                   # float32 logits, (None, 1000)
    info = model_info("inception_v3")                  # input_size=299, crop_fraction=0.875, ...
    pretrained = create_model("resnet50", weights="resnet50-0676ba61.pth")   # timm / torchvision weights
"""
from tfcnn.precision import require_keras_2

require_keras_2()

from tfcnn.models.factory import create_model  # noqa: E402
from tfcnn.models.registry import (DataConfig, ModelInfo, list_models, model_info, model_overrides,  # noqa: E402
                                   register_model, without_initializers)
from tfcnn.models.weights import load_weights  # noqa: E402

# Importing a family registers its variants.
from tfcnn.models import alexnet as _alexnet  # noqa: E402,F401
from tfcnn.models import densenet as _densenet  # noqa: E402,F401
from tfcnn.models import efficientnet as _efficientnet  # noqa: E402,F401
from tfcnn.models import googlenet as _googlenet  # noqa: E402,F401
from tfcnn.models import inception_resnet_v2 as _inception_resnet_v2  # noqa: E402,F401
from tfcnn.models import inception_v3 as _inception_v3  # noqa: E402,F401
from tfcnn.models import inception_v4 as _inception_v4  # noqa: E402,F401
from tfcnn.models import mobilenet_v2 as _mobilenet_v2  # noqa: E402,F401
from tfcnn.models import ngc as _ngc  # noqa: E402,F401
from tfcnn.models import overfeat as _overfeat  # noqa: E402,F401
from tfcnn.models import resnet as _resnet  # noqa: E402,F401
from tfcnn.models import vgg as _vgg  # noqa: E402,F401
from tfcnn.models import xception as _xception  # noqa: E402,F401

__all__ = ["DataConfig", "ModelInfo", "create_model", "list_models", "load_weights", "model_info", "model_overrides",
           "register_model", "without_initializers"]
